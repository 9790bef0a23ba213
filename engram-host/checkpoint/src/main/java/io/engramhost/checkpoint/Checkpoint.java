package io.engramhost.checkpoint;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;
import java.util.stream.Stream;

/**
 * A validated checkpoint made of one or more safetensors files. Each path given to {@link #open} is a
 * {@code .safetensors} file, a {@code *.safetensors.index.json} (a sharded checkpoint: its weight_map
 * names the shards beside it), or a directory (its single index if it has one, else every
 * {@code *.safetensors} in it, sorted). Tensor names are unique across all files; tensors are ordered by
 * name.
 */
public final class Checkpoint {
    public static final String INDEX_SUFFIX = ".safetensors.index.json";
    public static final String FILE_SUFFIX = ".safetensors";

    private final List<Path> paths;
    private final List<SafetensorsFile> files;
    private final Map<String, TensorInfo> tensors;
    private final Map<Path, SafetensorsFile> byPath;
    private final Map<Path, Path> givenAs;

    private Checkpoint(List<Path> paths, List<SafetensorsFile> files, Map<String, TensorInfo> tensors,
            Map<Path, Path> givenAs) {
        this.paths = List.copyOf(paths);
        this.files = List.copyOf(files);
        this.tensors = Collections.unmodifiableMap(tensors);
        this.byPath = new HashMap<>();
        for (SafetensorsFile f : files) {
            byPath.put(f.path(), f);
        }
        this.givenAs = Map.copyOf(givenAs);
    }

    public static Checkpoint open(List<Path> paths) {
        return open(paths, SafetensorsFile::open);
    }

    /** Opens each safetensors file through {@code opener} (an {@link OpenCheckpoint} keeps their fds). */
    static Checkpoint open(List<Path> paths, Function<Path, SafetensorsFile> opener) {
        if (paths.isEmpty()) {
            throw new CheckpointException("no checkpoint path given");
        }
        Map<Path, SafetensorsFile> files = new LinkedHashMap<>();
        Map<Path, Path> givenAs = new HashMap<>();
        for (Path p : paths) {
            for (SafetensorsFile f : resolve(p, opener)) {
                Path key = f.path().toAbsolutePath().normalize();
                if (files.putIfAbsent(key, f) != null) {
                    throw new CheckpointException(f.path() + ": given more than once (via " + p + ")");
                }
                givenAs.put(f.path(), p);
            }
        }
        Map<String, TensorInfo> tensors = new TreeMap<>(FingerprintCodec::compareNames);
        for (SafetensorsFile f : files.values()) {
            for (TensorInfo t : f.tensors()) {
                TensorInfo other = tensors.putIfAbsent(t.name(), t);
                if (other != null) {
                    throw new CheckpointException("tensor '" + t.name() + "' is in both " + other.file() + " and "
                            + t.file());
                }
            }
        }
        return new Checkpoint(paths, new ArrayList<>(files.values()), tensors, givenAs);
    }

    public static Checkpoint open(Path... paths) {
        return open(List.of(paths));
    }

    private static List<SafetensorsFile> resolve(Path p, Function<Path, SafetensorsFile> opener) {
        if (Files.isDirectory(p)) {
            return directory(p, opener);
        }
        String name = p.getFileName() == null ? "" : p.getFileName().toString();
        if (!Files.exists(p)) {
            throw new CheckpointException(p + ": no such file or directory");
        }
        if (name.endsWith(INDEX_SUFFIX)) {
            return ShardIndex.open(p, opener);
        }
        if (name.endsWith(FILE_SUFFIX)) {
            return List.of(opener.apply(p));
        }
        throw new CheckpointException(p + ": not a " + FILE_SUFFIX + " file, a *" + INDEX_SUFFIX + " or a directory");
    }

    private static List<SafetensorsFile> directory(Path dir, Function<Path, SafetensorsFile> opener) {
        List<Path> indexes = new ArrayList<>();
        List<Path> shards = new ArrayList<>();
        try (Stream<Path> entries = Files.list(dir)) {
            entries.sorted().forEach(e -> {
                String n = e.getFileName().toString();
                if (n.endsWith(INDEX_SUFFIX) && Files.isRegularFile(e)) {
                    indexes.add(e);
                } else if (n.endsWith(FILE_SUFFIX) && Files.isRegularFile(e)) {
                    shards.add(e);
                }
            });
        } catch (IOException e) {
            throw new CheckpointException(dir + ": cannot list: " + e, e);
        }
        if (indexes.size() > 1) {
            throw new CheckpointException(dir + ": holds " + indexes.size() + " index files "
                    + indexes.stream().map(i -> i.getFileName().toString()).toList() + ": name the one to use");
        }
        if (indexes.size() == 1) {
            return ShardIndex.open(indexes.get(0), opener);
        }
        if (shards.isEmpty()) {
            throw new CheckpointException(dir + ": holds no *" + FILE_SUFFIX + " file and no *" + INDEX_SUFFIX);
        }
        return shards.stream().map(opener).toList();
    }

    /** The paths it was opened from, as given: files, indexes and directories. */
    public List<Path> paths() {
        return paths;
    }

    /** The path given to {@link #open} through which {@code f} (one of {@link #files}) was found. */
    public Path givenAs(SafetensorsFile f) {
        Path p = givenAs.get(f.path());
        if (p == null) {
            throw new IllegalArgumentException(f.path() + " is not a file of this checkpoint");
        }
        return p;
    }

    /**
     * The model directory of this checkpoint, where its config.json would be: the directory, or the index's
     * directory, when it was opened from one directory or one {@code *.safetensors.index.json}; else null.
     */
    public Path modelDirectory() {
        if (paths.size() != 1) {
            return null;
        }
        Path p = paths.get(0);
        if (Files.isDirectory(p)) {
            return p;
        }
        Path name = p.getFileName();
        if (name == null || !name.toString().endsWith(INDEX_SUFFIX)) {
            return null;
        }
        return p.getParent() != null ? p.getParent() : p.toAbsolutePath().getParent();
    }

    /** The files, in the order they were given (shards of an index or a directory by name). */
    public List<SafetensorsFile> files() {
        return files;
    }

    /** Every tensor, ordered by name. */
    public List<TensorInfo> tensors() {
        return List.copyOf(tensors.values());
    }

    /** The tensor named {@code name}, or null. */
    public TensorInfo tensor(String name) {
        return tensors.get(name);
    }

    /** The file that holds {@code t}. */
    public SafetensorsFile fileOf(TensorInfo t) {
        SafetensorsFile f = byPath.get(t.file());
        if (f == null || !t.equals(f.tensor(t.name()))) {
            throw new IllegalArgumentException("tensor '" + t.name() + "' is not from this checkpoint");
        }
        return f;
    }

    /**
     * The tensors whose names match any of {@code patterns} ({@link Glob}: {@code *}, {@code ?}), by name.
     * An empty list or {@code *} selects all. A pattern that matches nothing is an error naming it.
     */
    public List<TensorInfo> select(List<String> patterns) {
        if (patterns.isEmpty()) {
            return tensors();
        }
        Map<String, TensorInfo> chosen = new TreeMap<>(FingerprintCodec::compareNames);
        for (String text : patterns) {
            Glob glob;
            try {
                glob = Glob.of(text);
            } catch (IllegalArgumentException e) {
                throw new CheckpointException("tensor selection: " + e.getMessage());
            }
            int matched = 0;
            for (TensorInfo t : tensors.values()) {
                if (glob.matches(t.name())) {
                    chosen.put(t.name(), t);
                    matched++;
                }
            }
            if (matched == 0 && !glob.matchesAll()) {
                throw new CheckpointException("tensor selection: pattern '" + text + "' matches none of the "
                        + tensors.size() + " tensors of " + describeFiles());
            }
        }
        return List.copyOf(chosen.values());
    }

    /** Total bytes of {@code selection}. */
    public static long totalBytes(List<TensorInfo> selection) {
        long sum = 0;
        for (TensorInfo t : selection) {
            sum = Math.addExact(sum, t.length());
        }
        return sum;
    }

    private String describeFiles() {
        return files.size() == 1 ? files.get(0).path().toString()
                : files.size() + " files in " + files.get(0).path().toAbsolutePath().getParent();
    }

    @Override
    public String toString() {
        return "Checkpoint[" + files.size() + " files, " + tensors.size() + " tensors]";
    }
}
