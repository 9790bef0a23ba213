package io.engramhost.checkpoint;

import io.engramhost.json.JsonWriter;
import io.engramhost.os.Fd;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.Stream;

/**
 * Writes synthetic checkpoints, filled with pseudo-random bytes that depend only on the seed and the tensor name
 * (so single-file and sharded forms hold identical tensors), in two layouts:
 * <ul>
 *   <li>the published one of DeepSeek-V4.1 ({@link #writeModel}): for each Engram layer L,
 *       {@code PREFIXlayers.L.engram.embed.weight} F8_E4M3 [rows_L, dim] and {@code .scale} F8_E8M0
 *       [rows_L, dim/32] beside a {@code config.json} that names them, alone or in the whole model's shape;</li>
 *   <li>a synthetic one for tests that need any checkpoint ({@link #writeSingle}, {@link #writeSharded}):
 *       {@code engram.layers.<id>.embedding.weight} and {@code .scale}, rows and dim alike for every layer.</li>
 * </ul>
 */
public final class CheckpointGenerator {
    /** Scale block: one E8M0 scale per 32 values. */
    public static final int BLOCK = 32;
    public static final String SINGLE_FILE = "model.safetensors";
    public static final String INDEX_FILE = "model" + Checkpoint.INDEX_SUFFIX;
    /**
     * Each later Engram layer of the published model has more rows than the first, by about 1/36523 of them per
     * layer (384006168, then 384016682): {@link #layerRows}.
     */
    public static final long ROWS_STEP_DIVISOR = 36523;
    /** The number of shards the whole model's layout ({@link Model#wholeModel}) has besides its Engram shards. */
    static final int ORDINARY_SHARDS = 4;
    /** Rows of the small per-layer Engram projection ({@code wkv}) and values per row of the ordinary tensors. */
    static final int SMALL_ROWS = 512;
    static final int VOCAB = 1024;

    /** What to generate. Layer ids are distinct and non-negative; dim is a positive multiple of 32. */
    public record Spec(List<Integer> layers, long rows, int dim, long seed) {
        public Spec {
            layers = List.copyOf(new TreeSet<>(layers));
            if (layers.isEmpty()) {
                throw new IllegalArgumentException("no layer ids given");
            }
            if (layers.get(0) < 0) {
                throw new IllegalArgumentException("layer id " + layers.get(0) + " is negative");
            }
            if (rows < 0) {
                throw new IllegalArgumentException("rows must be >= 0, was " + rows);
            }
            if (dim <= 0 || dim % BLOCK != 0) {
                throw new IllegalArgumentException("dim must be a positive multiple of " + BLOCK + " (one E8M0 scale"
                        + " per " + BLOCK + " values), was " + dim);
            }
            Math.multiplyExact(rows, (long) dim);
        }

        /** Bytes of one layer: weight plus scale. */
        public long bytesPerLayer() {
            return rows * dim + rows * (dim / BLOCK);
        }
    }

    /**
     * What {@link #writeModel} writes: Engram {@code layers} (distinct, non-negative), {@code rows} of the first
     * (at least 1; later ones {@link #layerRows}), {@code dim} values per row (a positive multiple of 32), the
     * {@code seed} of the bytes, a {@code prefix} before every tensor name (empty or ending in '.'), the whole
     * model's shape or the Engram tables alone, and one file or shards with an index.
     */
    public record Model(List<Integer> layers, long rows, int dim, long seed, String prefix, boolean wholeModel,
            boolean singleFile) {
        public Model {
            if (rows < 1) {
                throw new IllegalArgumentException("rows must be at least 1, was " + rows);
            }
            new Spec(layers, 0, dim, seed); // the same checks of the layers and dim
            layers = List.copyOf(new TreeSet<>(layers));
            if (!prefix.isEmpty() && !prefix.endsWith(".")) {
                throw new IllegalArgumentException("prefix '" + prefix + "' must be empty or end in '.'");
            }
            try {
                for (int i = 0; i < layers.size(); i++) {
                    Math.multiplyExact(layerRows(rows, i), (long) dim);
                }
            } catch (ArithmeticException e) {
                throw new IllegalArgumentException(rows + " rows of " + dim + " values are more than 2^63 bytes");
            }
        }

        /** The rows of each layer, in layer order. */
        public List<Long> rowsPerLayer() {
            List<Long> out = new ArrayList<>();
            for (int i = 0; i < layers.size(); i++) {
                out.add(layerRows(rows, i));
            }
            return out;
        }
    }

    /** What {@link #writeModel} wrote: the path to serve (the index, or the directory), every file, the bytes. */
    public record Written(Path served, List<Path> files, long tensorBytes) {
        public Written {
            files = List.copyOf(files);
        }
    }

    private CheckpointGenerator() {
    }

    /** Rows of the {@code i}-th Engram layer when the first has {@code first}: first + i * (first / 36523). */
    public static long layerRows(long first, int i) {
        return Math.addExact(first, Math.multiplyExact(i, first / ROWS_STEP_DIVISOR));
    }

    /** {@code PREFIXlayers.L.engram.embed.weight}, the published name of layer L's Engram embedding table. */
    public static String embedWeightName(String prefix, int layer) {
        return prefix + "layers." + layer + "." + Selection.WEIGHT;
    }

    /** {@code PREFIXlayers.L.engram.embed.scale}, its scales. */
    public static String embedScaleName(String prefix, int layer) {
        return prefix + "layers." + layer + "." + Selection.SCALE;
    }

    /**
     * Writes {@code model} into {@code dir} (created if need be) in the published layout, and its config.json.
     * Engram tables alone: one shard per layer and {@code model.safetensors.index.json}, or one
     * {@code model.safetensors}. The whole model: the ordinary tensors in four shards and the Engram layers, each
     * beside its small Engram weights, in the last two (one for a single layer), with the index; or all in one
     * file. Each file is written beside its name and renamed over it: files of other names are left as they are.
     */
    public static Written writeModel(Path dir, Model model) throws IOException {
        Files.createDirectories(dir);
        String prefix = model.prefix();
        List<List<Tensor>> shards = new ArrayList<>();
        if (model.wholeModel()) {
            long[][] shapes = {{VOCAB, SMALL_ROWS}, {SMALL_ROWS, SMALL_ROWS}, {SMALL_ROWS}, {VOCAB, SMALL_ROWS}};
            String[] names = {"embed.weight", "layers.0.attn.wq.weight", "norm.weight", "head.weight"};
            for (int i = 0; i < ORDINARY_SHARDS; i++) {
                shards.add(List.of(new Tensor(prefix, names[i], DType.BF16, shapes[i])));
            }
            int engramShards = Math.min(2, model.layers().size());
            for (int i = 0; i < engramShards; i++) {
                shards.add(new ArrayList<>());
            }
            for (int i = 0; i < model.layers().size(); i++) {
                List<Tensor> shard = shards.get(ORDINARY_SHARDS + i * engramShards / model.layers().size());
                shard.addAll(engramLayer(model, i));
                shard.addAll(smallEngramWeights(model, model.layers().get(i)));
            }
        } else {
            for (int i = 0; i < model.layers().size(); i++) {
                shards.add(engramLayer(model, i));
            }
        }
        List<Path> written = new ArrayList<>();
        long bytes = 0;
        Path served;
        if (model.singleFile()) {
            SafetensorsWriter w = new SafetensorsWriter().metadata("format", "pt");
            shards.forEach(shard -> shard.forEach(t -> t.addTo(w, model.seed())));
            written.add(w.write(dir.resolve(SINGLE_FILE)));
            bytes = w.dataLength();
            served = dir;
        } else {
            Map<String, String> weightMap = new TreeMap<>();
            for (int i = 0; i < shards.size(); i++) {
                String shard = String.format("model-%05d-of-%05d.safetensors", i + 1, shards.size());
                SafetensorsWriter w = new SafetensorsWriter().metadata("format", "pt");
                for (Tensor t : shards.get(i)) {
                    t.addTo(w, model.seed());
                    weightMap.put(t.name(), shard);
                }
                written.add(w.write(dir.resolve(shard)));
                bytes += w.dataLength();
            }
            served = writeIndex(dir, bytes, weightMap);
            written.add(served);
        }
        written.add(SafetensorsWriter.writeFile(dir.resolve(ModelConfig.FILE), json(config(model))));
        return new Written(served, written, bytes);
    }

    /**
     * Lays out the files of {@code source} (a directory, not descended into) as {@code huggingface_hub} keeps a
     * download: each file copied to {@code repo/blobs/<its SHA-256>} and named by a relative symbolic link
     * {@code repo/snapshots/<revision>/<name>} (and {@code repo/refs/main} naming the revision). Returns the
     * snapshot's directory, a checkpoint at the {@code hf-snapshot} level ({@link HfSnapshot}).
     */
    public static Path writeHfSnapshot(Path source, Path repo, String revision) throws IOException {
        Path blobs = Files.createDirectories(repo.resolve(HfSnapshot.BLOBS));
        Path snapshot = Files.createDirectories(repo.resolve("snapshots").resolve(revision));
        List<Path> files;
        try (Stream<Path> entries = Files.list(source)) {
            files = entries.filter(Files::isRegularFile).sorted().toList();
        }
        for (Path f : files) {
            String sha;
            try (Fd fd = SafetensorsFile.openFd(f)) {
                sha = TreeDigest.hex(SafetensorsFile.sha256(f.toString(), fd, 0, Files.size(f)));
            }
            Path blob = blobs.resolve(sha);
            if (!Files.exists(blob)) {
                Files.copy(f, blob);
            }
            Path link = snapshot.resolve(f.getFileName());
            Files.deleteIfExists(link);
            Files.createSymbolicLink(link, snapshot.relativize(blob));
        }
        Path refs = Files.createDirectories(repo.resolve("refs"));
        Files.writeString(refs.resolve("main"), revision);
        return snapshot;
    }

    /** One tensor to write: its name (after the prefix), dtype and shape; its bytes come from that name. */
    private record Tensor(String prefix, String base, DType dtype, long[] shape) {
        String name() {
            return prefix + base;
        }

        void addTo(SafetensorsWriter w, long seed) {
            w.add(name(), dtype, shape, random(seed, base, dtype.byteLength(shape)));
        }
    }

    /** The {@code i}-th Engram layer's embedding table and its scales. */
    private static List<Tensor> engramLayer(Model model, int i) {
        int layer = model.layers().get(i);
        long rows = layerRows(model.rows(), i);
        return List.of(new Tensor(model.prefix(), embedWeightName("", layer), DType.F8_E4M3,
                        new long[] {rows, model.dim()}),
                new Tensor(model.prefix(), embedScaleName("", layer), DType.F8_E8M0,
                        new long[] {rows, model.dim() / BLOCK}));
    }

    /** Layer L's small Engram weights, which the published model keeps beside its tables. */
    private static List<Tensor> smallEngramWeights(Model model, int layer) {
        String at = "layers." + layer + ".engram.";
        return List.of(new Tensor(model.prefix(), at + "wkv.weight", DType.F8_E4M3, new long[] {SMALL_ROWS, model.dim()}),
                new Tensor(model.prefix(), at + "wkv.scale", DType.F8_E8M0, new long[] {SMALL_ROWS, model.dim() / BLOCK}),
                new Tensor(model.prefix(), at + "q_weight", DType.BF16, new long[] {model.dim()}),
                new Tensor(model.prefix(), at + "k_weight", DType.BF16, new long[] {model.dim()}));
    }

    /** The config.json of {@code model}: a few ordinary fields and, in text_config, the Engram ones. */
    static Map<String, Object> config(Model model) {
        Map<String, Object> text = new LinkedHashMap<>();
        text.put("hidden_size", SMALL_ROWS);
        text.put("vocab_size", VOCAB);
        text.put("num_hidden_layers", model.layers().get(model.layers().size() - 1) + 1);
        text.put("rms_norm_eps", 1.0e-6);
        text.put(ModelConfig.LAYER_IDS, model.layers());
        text.put(ModelConfig.NUM_EMBEDDINGS, model.rowsPerLayer());
        text.put(ModelConfig.HEAD_DIM, model.dim());
        text.put("engram_n_heads", 8);
        text.put("engram_max_ngram_size", 4);
        Map<String, Object> config = new LinkedHashMap<>();
        config.put("architectures", List.of("DeepseekV4ForCausalLM"));
        config.put("model_type", "deepseek_v4");
        config.put("torch_dtype", "bfloat16");
        config.put(ModelConfig.TEXT_CONFIG, text);
        return config;
    }

    private static SafetensorsWriter.Content json(Object doc) {
        byte[] bytes = (JsonWriter.write(doc) + "\n").getBytes(StandardCharsets.UTF_8);
        return out -> out.write(bytes);
    }

    private static Path writeIndex(Path dir, long totalSize, Map<String, String> weightMap) throws IOException {
        Map<String, Object> index = new LinkedHashMap<>();
        index.put("metadata", Map.of("total_size", totalSize));
        index.put("weight_map", weightMap);
        return SafetensorsWriter.writeFile(dir.resolve(INDEX_FILE), json(index));
    }

    public static String weightName(int layer) {
        return "engram.layers." + layer + ".embedding.weight";
    }

    public static String scaleName(int layer) {
        return "engram.layers." + layer + ".embedding.scale";
    }

    /** Writes every layer into {@code dir/model.safetensors}; returns that path. */
    public static Path writeSingle(Path dir, Spec spec) throws IOException {
        Files.createDirectories(dir);
        SafetensorsWriter w = new SafetensorsWriter().metadata("format", "pt").metadata("generator", "engram-host");
        for (int layer : spec.layers()) {
            addLayer(w, spec, layer);
        }
        return w.write(dir.resolve(SINGLE_FILE));
    }

    /** Writes one shard per layer plus {@code dir/model.safetensors.index.json}; returns the index path. */
    public static Path writeSharded(Path dir, Spec spec) throws IOException {
        Files.createDirectories(dir);
        int n = spec.layers().size();
        Map<String, String> weightMap = new TreeMap<>();
        for (int i = 0; i < n; i++) {
            int layer = spec.layers().get(i);
            String shard = String.format("model-%05d-of-%05d.safetensors", i + 1, n);
            SafetensorsWriter w = new SafetensorsWriter().metadata("format", "pt");
            addLayer(w, spec, layer);
            w.write(dir.resolve(shard));
            weightMap.put(weightName(layer), shard);
            weightMap.put(scaleName(layer), shard);
        }
        return writeIndex(dir, spec.bytesPerLayer() * n, weightMap);
    }

    private static void addLayer(SafetensorsWriter w, Spec spec, int layer) {
        long[] weightShape = {spec.rows(), spec.dim()};
        long[] scaleShape = {spec.rows(), spec.dim() / BLOCK};
        w.add(weightName(layer), DType.F8_E4M3, weightShape,
                random(spec.seed(), weightName(layer), DType.F8_E4M3.byteLength(weightShape)));
        w.add(scaleName(layer), DType.F8_E8M0, scaleShape,
                random(spec.seed(), scaleName(layer), DType.F8_E8M0.byteLength(scaleShape)));
    }

    /** {@code length} bytes of xorshift64 output (little-endian longs) seeded from {@code seed} and {@code name}. */
    public static SafetensorsWriter.Content random(long seed, String name, long length) {
        return out -> {
            byte[] buf = new byte[(int) Math.min(length, 1 << 20)];
            ByteBuffer bb = ByteBuffer.wrap(buf).order(ByteOrder.LITTLE_ENDIAN);
            long x = initialState(seed, name);
            long left = length;
            while (left > 0) {
                int n = (int) Math.min(left, buf.length);
                bb.clear();
                for (int i = 0; i < n; i += 8) {
                    x ^= x << 13;
                    x ^= x >>> 7;
                    x ^= x << 17;
                    if (i + 8 <= buf.length) {
                        bb.putLong(i, x);
                    } else {
                        for (int k = 0; i + k < buf.length; k++) {
                            buf[i + k] = (byte) (x >>> (8 * k));
                        }
                    }
                }
                out.write(buf, 0, n);
                left -= n;
            }
        };
    }

    /** A non-zero xorshift state from the seed and a 64-bit FNV-1a hash of the name, mixed by splitmix64. */
    static long initialState(long seed, String name) {
        long h = 0xcbf29ce484222325L;
        for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
            h = (h ^ (b & 0xff)) * 0x100000001b3L;
        }
        long z = seed ^ h;
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        z ^= z >>> 31;
        return z == 0 ? 0x9e3779b97f4a7c15L : z;
    }
}
