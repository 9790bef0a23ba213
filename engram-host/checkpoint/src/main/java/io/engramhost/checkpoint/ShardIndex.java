package io.engramhost.checkpoint;

import io.engramhost.json.JsonException;
import io.engramhost.json.JsonReader;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;

/**
 * A sharded checkpoint's {@code *.safetensors.index.json}: its {@code weight_map} maps each tensor name
 * to a shard file name in the index's directory. {@link #open} opens every shard and checks that the map
 * and the shards agree both ways.
 */
final class ShardIndex {
    private static final long MAX_INDEX_BYTES = 100L << 20;

    private ShardIndex() {
    }

    /** The shards, in file-name order, after checking them against the weight map. */
    static List<SafetensorsFile> open(Path index, Function<Path, SafetensorsFile> opener) {
        String where = index.toString();
        Map<String, String> weightMap = weightMap(where, read(index));
        Path dir = index.toAbsolutePath().getParent();
        Map<String, SafetensorsFile> shards = new TreeMap<>();
        for (String shardName : new TreeSet<>(weightMap.values())) {
            Path shard = dir.resolve(shardName);
            if (!Files.isRegularFile(shard)) {
                String tensor = weightMap.entrySet().stream().filter(e -> e.getValue().equals(shardName))
                        .map(Map.Entry::getKey).findFirst().orElseThrow();
                throw new CheckpointException(where + ": weight_map names shard '" + shardName + "' (for tensor '"
                        + tensor + "'), but " + shard + " does not exist");
            }
            shards.put(shardName, opener.apply(shard));
        }
        for (Map.Entry<String, String> e : weightMap.entrySet()) {
            if (shards.get(e.getValue()).tensor(e.getKey()) == null) {
                throw new CheckpointException(where + ": weight_map puts tensor '" + e.getKey() + "' in '"
                        + e.getValue() + "', but that shard has no such tensor");
            }
        }
        for (SafetensorsFile shard : shards.values()) {
            for (TensorInfo t : shard.tensors()) {
                String mapped = weightMap.get(t.name());
                if (mapped == null) {
                    throw new CheckpointException(where + ": shard '" + shard.fileName() + "' holds tensor '"
                            + t.name() + "', which weight_map does not list");
                }
                if (!mapped.equals(shard.fileName())) {
                    throw new CheckpointException(where + ": shard '" + shard.fileName() + "' holds tensor '"
                            + t.name() + "', which weight_map puts in '" + mapped + "'");
                }
            }
        }
        return new ArrayList<>(shards.values());
    }

    private static byte[] read(Path index) {
        try {
            long size = Files.size(index);
            if (size > MAX_INDEX_BYTES) {
                throw new CheckpointException(index + ": index is " + size + " bytes, over the limit of "
                        + MAX_INDEX_BYTES);
            }
            return Files.readAllBytes(index);
        } catch (NoSuchFileException e) {
            throw new CheckpointException(index + ": no such file", e);
        } catch (IOException e) {
            throw new CheckpointException(index + ": cannot read: " + e, e);
        }
    }

    private static Map<String, String> weightMap(String where, byte[] bytes) {
        Object root;
        try {
            root = JsonReader.parse(bytes);
        } catch (JsonException e) {
            throw new CheckpointException(where + ": index JSON " + e.getMessage());
        }
        if (!(root instanceof Map<?, ?> map)) {
            throw new CheckpointException(where + ": index is not a JSON object");
        }
        Object wm = map.get("weight_map");
        if (!(wm instanceof Map<?, ?> entries)) {
            throw new CheckpointException(where + ": index has no weight_map object");
        }
        Map<String, String> out = new TreeMap<>();
        for (Map.Entry<?, ?> e : entries.entrySet()) {
            String tensor = (String) e.getKey();
            if (!(e.getValue() instanceof String shard)) {
                throw new CheckpointException(where + ": weight_map entry for tensor '" + tensor
                        + "' is not a file name but " + SafetensorsHeader.kind(e.getValue()));
            }
            if (shard.isEmpty() || shard.contains("/") || shard.equals(".") || shard.equals("..")
                    || shard.indexOf('\0') >= 0) {
                throw new CheckpointException(where + ": weight_map entry for tensor '" + tensor + "' is '" + shard
                        + "', not a file name in the index's directory");
            }
            out.put(tensor, shard);
        }
        return out;
    }
}
