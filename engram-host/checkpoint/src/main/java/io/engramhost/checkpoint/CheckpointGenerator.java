package io.engramhost.checkpoint;

import io.engramhost.json.JsonWriter;
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

/**
 * Writes synthetic checkpoints in the DeepSeek-V4.1 Engram layout: for each layer id,
 * {@code engram.layers.<id>.embedding.weight} F8_E4M3 [rows, dim] and
 * {@code engram.layers.<id>.embedding.scale} F8_E8M0 [rows, dim/32], filled with pseudo-random bytes that
 * depend only on the seed and the tensor name (so single-file and sharded forms hold identical tensors).
 */
public final class CheckpointGenerator {
    /** Scale block: one E8M0 scale per 32 values. */
    public static final int BLOCK = 32;
    public static final String SINGLE_FILE = "model.safetensors";
    public static final String INDEX_FILE = "model" + Checkpoint.INDEX_SUFFIX;

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

    private CheckpointGenerator() {
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
        List<Path> written = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int layer = spec.layers().get(i);
            String shard = String.format("model-%05d-of-%05d.safetensors", i + 1, n);
            SafetensorsWriter w = new SafetensorsWriter().metadata("format", "pt");
            addLayer(w, spec, layer);
            written.add(w.write(dir.resolve(shard)));
            weightMap.put(weightName(layer), shard);
            weightMap.put(scaleName(layer), shard);
        }
        Map<String, Object> index = new LinkedHashMap<>();
        index.put("metadata", Map.of("total_size", spec.bytesPerLayer() * n));
        index.put("weight_map", weightMap);
        Path path = dir.resolve(INDEX_FILE);
        Files.write(path, JsonWriter.write(index).getBytes(StandardCharsets.UTF_8));
        return path;
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
