package io.engramhost.checkpoint;

import io.engramhost.util.Bytes;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * Which tensors of a checkpoint are served, by the one rule every command and client applies (docs/checkpoints.md,
 * "Which tensors are served: the selection"):
 * <ol>
 *   <li>{@link Rule#TABLES}: the {@code --tables} globs, when given;</li>
 *   <li>{@link Rule#CONFIG}: else, when the checkpoint was opened from one directory or one
 *       {@code *.safetensors.index.json} whose directory's config.json names {@code engram_layer_ids}
 *       ({@link ModelConfig}), each layer's {@code PREFIXlayers.L.engram.embed.weight} and {@code .scale}, PREFIX
 *       empty or any name ending in '.', their shapes checked against the config's other Engram fields;</li>
 *   <li>{@link Rule#ALL}: else every tensor, with a warning.</li>
 * </ol>
 * It gives the tensors, the patterns a fingerprint records (the globs; the selected names; {@code *}), a one-line
 * description and, for the last rule, the warning.
 */
public final class Selection {
    /** The tensor names of a layer's Engram tables, after the prefix: {@code layers.L.engram.embed.weight} etc. */
    public static final String WEIGHT = "engram.embed.weight";
    public static final String SCALE = "engram.embed.scale";

    /** Which rule chose the tensors; {@link #text()} is STATUS's {@code selection.rule}. */
    public enum Rule {
        TABLES("tables"), CONFIG("config"), ALL("all");

        private final String text;

        Rule(String text) {
            this.text = text;
        }

        public String text() {
            return text;
        }
    }

    private final Rule rule;
    private final List<String> patterns;
    private final List<TensorInfo> tensors;
    private final String description;
    private final ModelConfig config;

    private Selection(Rule rule, List<String> patterns, List<TensorInfo> tensors, String description,
            ModelConfig config) {
        this.rule = rule;
        this.patterns = List.copyOf(patterns);
        this.tensors = List.copyOf(tensors);
        this.description = description;
        this.config = config;
    }

    /**
     * The selection of {@code checkpoint} for {@code tables} (the {@code --tables} globs, empty when not given), by
     * the three rules. Throws {@link CheckpointException}: a glob that matches nothing, a config.json that is
     * malformed or disagrees with the tensors, a layer without its tables.
     */
    public static Selection of(Checkpoint checkpoint, List<String> tables) {
        if (!tables.isEmpty()) {
            return byTables(checkpoint, tables);
        }
        Path dir = checkpoint.modelDirectory();
        Optional<ModelConfig> config = dir == null ? Optional.empty() : ModelConfig.read(dir);
        if (config.isPresent()) {
            return byConfig(checkpoint, config.get());
        }
        return everything(checkpoint);
    }

    /**
     * The selection of {@code patterns} alone, as before there was a config rule: the globs when given, else every
     * tensor (without reading any config.json).
     */
    public static Selection ofPatterns(Checkpoint checkpoint, List<String> patterns) {
        return patterns.isEmpty() ? everything(checkpoint) : byTables(checkpoint, patterns);
    }

    private static Selection byTables(Checkpoint checkpoint, List<String> globs) {
        List<TensorInfo> chosen = checkpoint.select(globs);
        return new Selection(Rule.TABLES, globs, chosen, "--tables " + String.join(",", globs) + ": "
                + amount(chosen), null);
    }

    private static Selection everything(Checkpoint checkpoint) {
        List<TensorInfo> all = checkpoint.tensors();
        return new Selection(Rule.ALL, List.of("*"), all, "every tensor (no --tables, and no " + ModelConfig.FILE
                + " naming " + ModelConfig.LAYER_IDS + "): " + amount(all), null);
    }

    private static Selection byConfig(Checkpoint checkpoint, ModelConfig config) {
        List<TensorInfo> chosen = new ArrayList<>();
        for (int i = 0; i < config.layerIds().size(); i++) {
            long layer = config.layerIds().get(i);
            TensorInfo weight = layerTensor(checkpoint, config, layer, WEIGHT);
            TensorInfo scale = layerTensor(checkpoint, config, layer, SCALE);
            if (config.numEmbeddings() != null) {
                long rows = config.numEmbeddings().get(i);
                checkRows(config, i, rows, weight);
                checkRows(config, i, rows, scale);
            }
            if (config.headDim() != null) {
                long dim = config.headDim();
                checkDim(config, weight, dim, "");
                checkDim(config, scale, dim / CheckpointGenerator.BLOCK, " (one scale per " + CheckpointGenerator.BLOCK
                        + " values)");
            }
            chosen.add(weight);
            chosen.add(scale);
        }
        chosen.sort((a, b) -> FingerprintCodec.compareNames(a.name(), b.name()));
        List<String> names = chosen.stream().map(TensorInfo::name).toList();
        String first = names.get(0) + (names.size() > 1 ? ", ..." : "");
        return new Selection(Rule.CONFIG, names, chosen, ModelConfig.FILE + " " + ModelConfig.LAYER_IDS + " "
                + config.layerIds() + ": " + amount(chosen) + " (" + first + ")", config);
    }

    /** The one tensor named {@code PREFIXlayers.L.SUFFIX}, PREFIX empty or ending in '.'. */
    private static TensorInfo layerTensor(Checkpoint checkpoint, ModelConfig config, long layer, String suffix) {
        String base = "layers." + layer + "." + suffix;
        TensorInfo found = null;
        for (TensorInfo t : checkpoint.tensors()) {
            if (!t.name().equals(base) && !t.name().endsWith("." + base)) {
                continue;
            }
            if (found != null) {
                throw new CheckpointException(config.file() + ": layer " + layer + ": two tensors are named " + base
                        + " under different prefixes, " + Limits.quoted(found.name()) + " and "
                        + Limits.quoted(t.name()) + ": choose the tables with --tables");
            }
            found = t;
        }
        if (found == null) {
            throw new CheckpointException(config.file() + ": " + ModelConfig.LAYER_IDS + " names layer " + layer
                    + " but the checkpoint has no tensor " + base + " (under any prefix ending in '.'): serve the"
                    + " files this config.json belongs to, or choose the tables with --tables");
        }
        return found;
    }

    private static void checkRows(ModelConfig config, int i, long rows, TensorInfo t) {
        if (t.rank() == 0 || t.dim(0) != rows) {
            throw new CheckpointException(config.file() + ": " + ModelConfig.NUM_EMBEDDINGS + "[" + i + "] is " + rows
                    + " but " + t.name() + (t.rank() == 0 ? " has no rows (a scalar)" : " has " + t.dim(0) + " rows"));
        }
    }

    private static void checkDim(ModelConfig config, TensorInfo t, long columns, String why) {
        if (t.rank() != 2 || t.dim(1) != columns) {
            throw new CheckpointException(config.file() + ": " + ModelConfig.HEAD_DIM + " is " + config.headDim()
                    + " but " + t.name() + " is " + t.describe() + ", not [rows, " + columns + "]" + why);
        }
    }

    /** e.g. {@code 4 tensors, 1.2 GiB}. */
    private static String amount(List<TensorInfo> tensors) {
        return tensors.size() + (tensors.size() == 1 ? " tensor, " : " tensors, ")
                + Bytes.format(Checkpoint.totalBytes(tensors));
    }

    public Rule rule() {
        return rule;
    }

    /** What a fingerprint records: the globs, the selected tensors' names, or {@code *}. */
    public List<String> patterns() {
        return patterns;
    }

    /** The selected tensors, by name. */
    public List<TensorInfo> tensors() {
        return tensors;
    }

    /**
     * One line, what {@code serve} logs, STATUS shows and {@code inspect} prints after {@code selection: }, e.g.
     * {@code config.json engram_layer_ids [1, 14]: 4 tensors, 1.2 GiB (layers.1.engram.embed.scale, ...)}.
     */
    public String description() {
        return description;
    }

    /** The config.json the tensors were chosen by ({@link Rule#CONFIG}); empty otherwise. */
    public Optional<ModelConfig> config() {
        return Optional.ofNullable(config);
    }

    /**
     * For {@link Rule#ALL}, the one line that says every tensor is served and how to choose fewer ({@code serve}
     * logs it as a warning, the other commands print it on stderr); empty otherwise.
     */
    public Optional<String> warning() {
        if (rule != Rule.ALL) {
            return Optional.empty();
        }
        return Optional.of("selecting every tensor of the checkpoint (no --tables, and no " + ModelConfig.FILE
                + " naming " + ModelConfig.LAYER_IDS + "): give --tables GLOB,... or the model's directory (its "
                + ModelConfig.FILE + " names the Engram layers) to serve only the Engram tables");
    }

    @Override
    public String toString() {
        return "Selection[" + rule.text() + ": " + description + "]";
    }
}
