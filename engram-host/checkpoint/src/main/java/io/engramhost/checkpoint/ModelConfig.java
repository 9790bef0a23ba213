package io.engramhost.checkpoint;

import io.engramhost.json.JsonException;
import io.engramhost.json.JsonReader;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * The Engram fields of a model directory's {@code config.json} (docs/checkpoints.md, "Which tensors are served:
 * the selection"): {@code engram_layer_ids}, and when present {@code engram_num_embeddings} (rows per layer, in
 * the same order) and {@code engram_head_dim}. They are read from the top level when it names
 * {@code engram_layer_ids}, else from its {@code text_config} object; all from that one object. Reading is strict:
 * a file that is not JSON, or a field of the wrong type, is one {@link CheckpointException} line naming the file
 * and the field.
 *
 * @param file          the config.json read
 * @param layerIds      the Engram layers, distinct and non-negative, in the file's order (never empty)
 * @param numEmbeddings rows of each layer's tables, as long as {@code layerIds}; null when absent
 * @param headDim       values per row, a positive multiple of 32; null when absent
 */
public record ModelConfig(Path file, List<Long> layerIds, List<Long> numEmbeddings, Long headDim) {
    /** The file's name in a model directory. */
    public static final String FILE = "config.json";
    /** The object that holds a multimodal model's text fields. */
    public static final String TEXT_CONFIG = "text_config";
    public static final String LAYER_IDS = "engram_layer_ids";
    public static final String NUM_EMBEDDINGS = "engram_num_embeddings";
    public static final String HEAD_DIM = "engram_head_dim";
    /** The largest config.json read. */
    static final long MAX_BYTES = 16L << 20;
    /** What every message of a malformed config.json ends with. */
    private static final String FIX = ": fix the model's config.json, or choose the tables with --tables";

    public ModelConfig {
        layerIds = List.copyOf(layerIds);
        numEmbeddings = numEmbeddings == null ? null : List.copyOf(numEmbeddings);
    }

    /**
     * The Engram fields of {@code directory}'s config.json: empty when it has no config.json, or one that names no
     * {@code engram_layer_ids} (at its top level or in its {@code text_config}).
     */
    public static Optional<ModelConfig> read(Path directory) {
        Path file = directory.resolve(FILE);
        if (!Files.exists(file)) {
            return Optional.empty();
        }
        return parse(file, bytes(file));
    }

    private static byte[] bytes(Path file) {
        try {
            long size = Files.size(file);
            if (size > MAX_BYTES) {
                throw new CheckpointException(file + ": " + size + " bytes, over the limit of " + MAX_BYTES
                        + " for a config.json" + FIX);
            }
            return Files.readAllBytes(file);
        } catch (NoSuchFileException e) {
            throw new CheckpointException(file + ": no such file", e);
        } catch (IOException e) {
            throw new CheckpointException(file + ": cannot read: " + e, e);
        }
    }

    /** The Engram fields of {@code bytes}, the text of {@code file}; empty when it names no engram_layer_ids. */
    static Optional<ModelConfig> parse(Path file, byte[] bytes) {
        Object root;
        try {
            root = JsonReader.parse(bytes);
        } catch (JsonException e) {
            throw new CheckpointException(file + ": not JSON: at byte " + e.position() + ": " + e.problem() + FIX);
        }
        if (!(root instanceof Map<?, ?> top)) {
            throw new CheckpointException(file + ": not a JSON object but " + SafetensorsHeader.kind(root) + FIX);
        }
        Map<?, ?> fields = top;
        if (!top.containsKey(LAYER_IDS)) {
            Object text = top.get(TEXT_CONFIG);
            if (text == null) {
                return Optional.empty();
            }
            if (!(text instanceof Map<?, ?> t)) {
                throw new CheckpointException(file + ": " + TEXT_CONFIG + " is " + SafetensorsHeader.kind(text)
                        + ", not an object" + FIX);
            }
            if (!t.containsKey(LAYER_IDS)) {
                return Optional.empty();
            }
            fields = t;
        }
        List<Long> ids = integers(file, LAYER_IDS, fields.get(LAYER_IDS), "distinct non-negative integers");
        if (ids.isEmpty()) {
            throw new CheckpointException(file + ": " + LAYER_IDS + " is an empty list: it names no Engram layer" + FIX);
        }
        Set<Long> seen = new HashSet<>();
        for (int i = 0; i < ids.size(); i++) {
            if (!seen.add(ids.get(i))) {
                throw new CheckpointException(file + ": " + LAYER_IDS + "[" + i + "] repeats layer " + ids.get(i)
                        + ", not a list of distinct non-negative integers" + FIX);
            }
        }
        List<Long> rows = null;
        if (fields.containsKey(NUM_EMBEDDINGS)) {
            rows = integers(file, NUM_EMBEDDINGS, fields.get(NUM_EMBEDDINGS), "non-negative integers");
            if (rows.size() != ids.size()) {
                throw new CheckpointException(file + ": " + NUM_EMBEDDINGS + " has " + rows.size() + " entries but "
                        + LAYER_IDS + " has " + ids.size() + ": one per layer" + FIX);
            }
        }
        Long dim = null;
        if (fields.containsKey(HEAD_DIM)) {
            Object d = fields.get(HEAD_DIM);
            if (!(d instanceof Long l) || l <= 0 || l % CheckpointGenerator.BLOCK != 0) {
                throw new CheckpointException(file + ": " + HEAD_DIM + " is " + describe(d) + ", not a positive"
                        + " multiple of " + CheckpointGenerator.BLOCK + " (one E8M0 scale per "
                        + CheckpointGenerator.BLOCK + " values)" + FIX);
            }
            dim = l;
        }
        return Optional.of(new ModelConfig(file, ids, rows, dim));
    }

    /** {@code value} as a list of non-negative integers, or a line naming {@code field} and what it must be. */
    private static List<Long> integers(Path file, String field, Object value, String expected) {
        if (!(value instanceof List<?> list)) {
            throw new CheckpointException(file + ": " + field + " is " + describe(value) + ", not a list of " + expected
                    + FIX);
        }
        List<Long> out = new ArrayList<>(list.size());
        for (int i = 0; i < list.size(); i++) {
            if (!(list.get(i) instanceof Long l) || l < 0) {
                throw new CheckpointException(file + ": " + field + "[" + i + "] is " + describe(list.get(i))
                        + ", not a list of " + expected + FIX);
            }
            out.add(l);
        }
        return out;
    }

    /** A JSON value for a message: a number as itself, anything else as {@link SafetensorsHeader#kind} says. */
    private static String describe(Object v) {
        return v instanceof Long ? v.toString() : SafetensorsHeader.kind(v);
    }
}
