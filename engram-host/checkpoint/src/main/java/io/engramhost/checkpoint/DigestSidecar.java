package io.engramhost.checkpoint;

import io.engramhost.json.JsonException;
import io.engramhost.json.JsonReader;
import io.engramhost.json.JsonWriter;
import io.engramhost.os.DirFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.LongConsumer;

/**
 * A checkpoint's digest record, kept beside it (docs/checkpoints.md, "The sidecar" and "The digest record,
 * version 2"). Version 2, which {@code inspect --write-digests} writes, gives each table both its engram digest v1
 * and its {@value TreeDigest#ALGORITHM}:
 * <pre>
 *   {"format": "engram-content-digests", "version": 2, "chunk_bytes": 16777216,
 *    "tables": {"name": {"engram-digest-v1": "16 hex digits", "sha256-tree-v1": "64 hex digits"}, ...}}
 * </pre>
 * Version 1 gives the tree digest alone: {@code {"format": ..., "version": 1, "algorithm": "sha256-tree-v1",
 * "chunk_bytes": 16777216, "tables": {"name": "64 hex digits", ...}}}; it is still read ({@link #read}), and
 * written by {@link #write(Path, Map)} for tests and older readers. For a {@code .safetensors} file the record is
 * {@code <file>.engram-digests.json}; for a directory or an index, {@code <directory>/engram-digests.json}. Written
 * through a new temporary file ({@code O_CREAT|O_EXCL}, never following a symlink) renamed into place; a symlink
 * at the target is refused.
 */
public final class DigestSidecar {
    public static final String FORMAT = "engram-content-digests";
    /** The version {@link #write(Path, Map)} writes: tree digests alone. */
    public static final int VERSION = 1;
    /** The version {@link #writeRecord} writes: both digests of every table. */
    public static final int VERSION_2 = 2;
    /** The sidecar of {@code x.safetensors} is {@code x.safetensors.engram-digests.json}. */
    public static final String FILE_SUFFIX = ".engram-digests.json";
    /** The sidecar of a directory or an index, in that directory. */
    public static final String DIRECTORY_FILE = "engram-digests.json";
    /** The largest sidecar read. */
    public static final long MAX_BYTES = 256L << 20;
    /** A version 2 table's key for its engram digest v1 (and the digest's name in a fingerprint's differences). */
    public static final String ENGRAM_KEY = "engram-digest-v1";
    private static final List<String> FIELDS_1 = List.of("format", "version", "algorithm", "chunk_bytes", "tables");
    private static final List<String> FIELDS_2 = List.of("format", "version", "chunk_bytes", "tables");
    private static final List<String> TABLE_FIELDS = List.of(ENGRAM_KEY, TreeDigest.ALGORITHM);

    /**
     * A record as read: its version, each table's tree digest, and, for version 2, each table's two digests
     * ({@code both} is empty for version 1).
     */
    public record Record(Path path, int version, Map<String, String> treeDigests, Map<String, TableDigests> both) {
        public Record {
            treeDigests = Collections.unmodifiableMap(new LinkedHashMap<>(treeDigests));
            both = Collections.unmodifiableMap(new LinkedHashMap<>(both));
        }
    }

    private DigestSidecar() {
    }

    /** True when {@code path}'s name is that of a sidecar. */
    public static boolean isSidecar(Path path) {
        Path name = path.getFileName();
        return name != null && (name.toString().endsWith(FILE_SUFFIX) || name.toString().equals(DIRECTORY_FILE));
    }

    /** Where the sidecar of {@code checkpoint} (a .safetensors file, an index or a directory) goes. */
    public static Path locationFor(Path checkpoint) {
        if (Files.isDirectory(checkpoint)) {
            return checkpoint.resolve(DIRECTORY_FILE);
        }
        String name = checkpoint.getFileName() == null ? "" : checkpoint.getFileName().toString();
        Path dir = checkpoint.toAbsolutePath().getParent();
        if (name.endsWith(Checkpoint.INDEX_SUFFIX)) {
            return dir.resolve(DIRECTORY_FILE);
        }
        if (name.endsWith(Checkpoint.FILE_SUFFIX)) {
            return dir.resolve(name + FILE_SUFFIX);
        }
        throw new CheckpointException(checkpoint + ": not a " + Checkpoint.FILE_SUFFIX + " file, a *"
                + Checkpoint.INDEX_SUFFIX + " or a directory");
    }

    /**
     * The tree digest of each of {@code tensors} of {@code checkpoint}, read through its open fds on
     * {@code threads} threads; by name, as 64 hex digits. Throws when a file changed while it was read.
     */
    public static Map<String, String> compute(OpenCheckpoint checkpoint, List<TensorInfo> tensors, int threads) {
        List<byte[]> digests = TreeDigest.digestAll(sources(checkpoint, tensors), threads);
        checkUnchanged(checkpoint);
        Map<String, String> out = new LinkedHashMap<>();
        for (int i = 0; i < tensors.size(); i++) {
            out.put(tensors.get(i).name(), TreeDigest.hex(digests.get(i)));
        }
        return out;
    }

    /**
     * Both digests of each of {@code tensors} of {@code checkpoint} (what a version 2 record holds), from one read
     * of their bytes through its open fds on {@code threads} threads; by name. {@code progress} is told the bytes
     * hashed as they are. Throws when a file changed while it was read.
     */
    public static Map<String, TableDigests> computeRecord(OpenCheckpoint checkpoint, List<TensorInfo> tensors,
            int threads, LongConsumer progress) {
        List<TableDigests> digests = TreeDigest.bothAll(sources(checkpoint, tensors), threads, progress);
        checkUnchanged(checkpoint);
        Map<String, TableDigests> out = new LinkedHashMap<>();
        for (int i = 0; i < tensors.size(); i++) {
            out.put(tensors.get(i).name(), digests.get(i));
        }
        return out;
    }

    private static List<TreeDigest.Source> sources(OpenCheckpoint checkpoint, List<TensorInfo> tensors) {
        return tensors.stream().<TreeDigest.Source>map(t -> new TreeDigest.FileRegion(checkpoint.fd(t), t.offset(),
                t.length(), t.file() + ": tensor '" + t.name() + "'")).toList();
    }

    private static void checkUnchanged(OpenCheckpoint checkpoint) {
        checkpoint.checkUnchanged("while its digests were computed",
                "its digests would describe no one version of it; run again once the file is stable");
    }

    /** The version 1 text for {@code digests} (table name to 64 hex digits). */
    public static String format(Map<String, String> digests) {
        Map<String, String> tables = new TreeMap<>(FingerprintCodec::compareNames);
        digests.forEach((name, hex) -> {
            if (!TreeDigest.isHex(hex)) {
                throw new IllegalArgumentException("table '" + name + "': digest '" + hex
                        + "' is not 64 lower-case hex digits");
            }
            tables.put(name, hex);
        });
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("format", FORMAT);
        doc.put("version", VERSION);
        doc.put("algorithm", TreeDigest.ALGORITHM);
        doc.put("chunk_bytes", TreeDigest.CHUNK);
        doc.put("tables", tables);
        return JsonWriter.write(doc) + "\n";
    }

    /** The version 2 text for {@code digests}: compact JSON, tables sorted by name, ending in a newline. */
    public static String formatRecord(Map<String, TableDigests> digests) {
        Map<String, Object> tables = new TreeMap<>(FingerprintCodec::compareNames);
        digests.forEach((name, d) -> {
            Map<String, String> entry = new LinkedHashMap<>();
            entry.put(ENGRAM_KEY, d.engramDigest());
            entry.put(TreeDigest.ALGORITHM, d.treeDigest());
            tables.put(name, entry);
        });
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("format", FORMAT);
        doc.put("version", VERSION_2);
        doc.put("chunk_bytes", TreeDigest.CHUNK);
        doc.put("tables", tables);
        return JsonWriter.write(doc) + "\n";
    }

    /** Writes a version 1 record of {@code digests} (tree digests alone) to {@code target}, as {@link #writeText}. */
    public static void write(Path target, Map<String, String> digests) {
        writeText(target, format(digests));
    }

    /** Writes a version 2 record of {@code digests} to {@code target}, as {@link #writeText}. */
    public static void writeRecord(Path target, Map<String, TableDigests> digests) {
        writeText(target, formatRecord(digests));
    }

    /**
     * Writes {@code text} to {@code target}: into a new file beside it, created through a descriptor of
     * the directory with {@code O_CREAT|O_EXCL|O_NOFOLLOW}, synced, then renamed over {@code target}
     * ({@code renameat}, which replaces a name and never follows it). A symlink or a directory at
     * {@code target} is refused.
     */
    private static void writeText(Path target, String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        Path absolute = target.toAbsolutePath();
        String name = absolute.getFileName().toString();
        byte[] random = new byte[6];
        new SecureRandom().nextBytes(random);
        String tmp = "." + name + ".tmp-" + HexFormat.of().formatHex(random);
        try (DirFd dir = DirFd.openFollowing(absolute.getParent())) {
            FileStat there = dir.statAt(name);
            if (there != null && there.isSymlink()) {
                throw new CheckpointException(target + ": is a symbolic link; refusing to write the digests through it");
            }
            if (there != null && !there.isRegular()) {
                throw new CheckpointException(target + ": is " + there.typeName() + ", not a regular file");
            }
            boolean renamed = false;
            try {
                try (Fd fd = dir.openFile(tmp, DirFd.O_WRONLY | Posix.O_CREAT | DirFd.O_EXCL, 0644)) {
                    DirFd.writeFully(fd, bytes, 0);
                    DirFd.fsync(fd);
                }
                dir.rename(tmp, name);
                renamed = true;
            } finally {
                if (!renamed) {
                    try {
                        dir.unlink(tmp);
                    } catch (RuntimeException ignored) {
                        // the first error is the one to report
                    }
                }
            }
        } catch (NativeException e) {
            throw new CheckpointException(target + ": cannot write the digests: " + e.getMessage(), e);
        }
    }

    /**
     * Reads a record of either version and returns each table's tree digest (what {@code verify} and
     * {@code --verify-content} check against); strict as {@link #readRecord}.
     */
    public static Map<String, String> read(Path sidecar) {
        return readRecord(sidecar).treeDigests();
    }

    /**
     * Reads and checks a record strictly: a JSON object with exactly the fields of its version (1: format,
     * version, algorithm, chunk_bytes, tables; 2: format, version, chunk_bytes, tables), this format, algorithm
     * and chunk size, every table name non-empty, every version 1 digest 64 lower-case hex digits, every version 2
     * table an object of exactly its engram digest v1 (16 hex digits) and its tree digest (64). Throws
     * {@link CheckpointException} naming the file and the problem.
     */
    public static Record readRecord(Path sidecar) {
        String where = sidecar.toString();
        byte[] bytes;
        try {
            long size = Files.size(sidecar);
            if (size > MAX_BYTES) {
                throw new CheckpointException(where + ": " + size + " bytes, over the limit of " + MAX_BYTES
                        + " for a digest sidecar");
            }
            bytes = Files.readAllBytes(sidecar);
        } catch (NoSuchFileException e) {
            throw new CheckpointException(where + ": no such file", e);
        } catch (IOException e) {
            throw new CheckpointException(where + ": cannot read: " + e, e);
        }
        Object root;
        try {
            root = JsonReader.parse(bytes);
        } catch (JsonException e) {
            throw new CheckpointException(where + ": not a digest sidecar: JSON at byte " + e.position() + ": "
                    + e.problem());
        }
        if (!(root instanceof Map<?, ?> doc)) {
            throw new CheckpointException(where + ": not a digest sidecar: not a JSON object but "
                    + SafetensorsHeader.kind(root));
        }
        boolean v2 = Long.valueOf(VERSION_2).equals(doc.get("version"));
        List<String> fields = v2 ? FIELDS_2 : FIELDS_1;
        for (Object key : doc.keySet()) {
            if (!fields.contains(key)) {
                throw new CheckpointException(where + ": unexpected field '" + key + "' (expected "
                        + String.join(", ", fields) + ")");
            }
        }
        expect(where, doc, "format", FORMAT);
        if (!v2) {
            expect(where, doc, "version", (long) VERSION, "1 and 2");
            expect(where, doc, "algorithm", TreeDigest.ALGORITHM);
        }
        expect(where, doc, "chunk_bytes", TreeDigest.CHUNK);
        if (!(doc.get("tables") instanceof Map<?, ?> tables)) {
            throw new CheckpointException(where + ": 'tables' is not an object of table name to digest"
                    + (v2 ? "s" : "") + " but " + SafetensorsHeader.kind(doc.get("tables")));
        }
        Map<String, String> tree = new LinkedHashMap<>();
        Map<String, TableDigests> both = new LinkedHashMap<>();
        for (Map.Entry<?, ?> e : tables.entrySet()) {
            String name = (String) e.getKey();
            if (name.isEmpty()) {
                throw new CheckpointException(where + ": a table has an empty name");
            }
            if (v2) {
                TableDigests d = tableDigests(where, name, e.getValue());
                both.put(name, d);
                tree.put(name, d.treeDigest());
            } else {
                if (!(e.getValue() instanceof String hex) || !TreeDigest.isHex(hex)) {
                    throw new CheckpointException(where + ": table " + Limits.quoted(name) + ": digest is "
                            + SafetensorsHeader.kind(e.getValue()) + ", not 64 lower-case hex digits");
                }
                tree.put(name, hex);
            }
        }
        return new Record(sidecar, v2 ? VERSION_2 : VERSION, tree, both);
    }

    /** A version 2 table: an object of exactly its two digests. */
    private static TableDigests tableDigests(String where, String name, Object value) {
        String at = where + ": table " + Limits.quoted(name) + ": ";
        if (!(value instanceof Map<?, ?> entry)) {
            throw new CheckpointException(at + "not an object of " + String.join(" and ", TABLE_FIELDS) + " but "
                    + SafetensorsHeader.kind(value));
        }
        for (Object key : entry.keySet()) {
            if (!TABLE_FIELDS.contains(key)) {
                throw new CheckpointException(at + "unexpected field '" + key + "' (expected "
                        + String.join(", ", TABLE_FIELDS) + ")");
            }
        }
        Object engram = entry.get(ENGRAM_KEY);
        if (!(engram instanceof String e) || !ContentDigest.isHex(e)) {
            throw new CheckpointException(at + ENGRAM_KEY + " is " + SafetensorsHeader.kind(engram)
                    + ", not 16 lower-case hex digits");
        }
        Object tree = entry.get(TreeDigest.ALGORITHM);
        if (!(tree instanceof String t) || !TreeDigest.isHex(t)) {
            throw new CheckpointException(at + TreeDigest.ALGORITHM + " is " + SafetensorsHeader.kind(tree)
                    + ", not 64 lower-case hex digits");
        }
        return new TableDigests(e, t);
    }

    private static void expect(String where, Map<?, ?> doc, String field, Object value) {
        expect(where, doc, field, value, value instanceof String ? "\"" + value + "\"" : String.valueOf(value));
    }

    /** {@code doc}'s {@code field} must be {@code value}; {@code readable} says what this build reads. */
    private static void expect(String where, Map<?, ?> doc, String field, Object value, String readable) {
        if (!doc.containsKey(field)) {
            throw new CheckpointException(where + ": not a digest sidecar: no '" + field + "'");
        }
        Object v = doc.get(field);
        if (!value.equals(v)) {
            throw new CheckpointException(where + ": '" + field + "' is " + SafetensorsHeader.kind(v) + ", this build"
                    + " reads only " + readable);
        }
    }
}
