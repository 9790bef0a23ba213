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
import java.util.Set;
import java.util.TreeMap;

/**
 * A checkpoint's content digests ({@value TreeDigest#ALGORITHM}) kept beside it, so a client can check the
 * bytes it maps without reading the checkpoint (docs/checkpoints.md, "Content digest sidecar"):
 * <pre>
 *   {"format": "engram-content-digests", "version": 1, "algorithm": "sha256-tree-v1",
 *    "chunk_bytes": 16777216, "tables": {"name": "64 hex digits", ...}}
 * </pre>
 * For a {@code .safetensors} file it is {@code <file>.engram-digests.json}; for a directory or an index,
 * {@code <directory>/engram-digests.json}. Written through a new temporary file ({@code O_CREAT|O_EXCL},
 * never following a symlink) renamed into place; a symlink at the target is refused.
 */
public final class DigestSidecar {
    public static final String FORMAT = "engram-content-digests";
    public static final int VERSION = 1;
    /** The sidecar of {@code x.safetensors} is {@code x.safetensors.engram-digests.json}. */
    public static final String FILE_SUFFIX = ".engram-digests.json";
    /** The sidecar of a directory or an index, in that directory. */
    public static final String DIRECTORY_FILE = "engram-digests.json";
    /** The largest sidecar read. */
    public static final long MAX_BYTES = 256L << 20;
    private static final Set<String> FIELDS = Set.of("format", "version", "algorithm", "chunk_bytes", "tables");

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
        List<TreeDigest.Source> sources = tensors.stream().<TreeDigest.Source>map(t -> new TreeDigest.FileRegion(
                checkpoint.fd(t), t.offset(), t.length(), t.file() + ": tensor '" + t.name() + "'")).toList();
        List<byte[]> digests = TreeDigest.digestAll(sources, threads);
        checkpoint.checkUnchanged("while its digests were computed",
                "its digests would describe no one version of it; run again once the file is stable");
        Map<String, String> out = new LinkedHashMap<>();
        for (int i = 0; i < tensors.size(); i++) {
            out.put(tensors.get(i).name(), TreeDigest.hex(digests.get(i)));
        }
        return out;
    }

    /** The sidecar's text for {@code digests} (table name to 64 hex digits). */
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

    /**
     * Writes {@code digests} to {@code target}: into a new file beside it, created through a descriptor of
     * the directory with {@code O_CREAT|O_EXCL|O_NOFOLLOW}, synced, then renamed over {@code target}
     * ({@code renameat}, which replaces a name and never follows it). A symlink or a directory at
     * {@code target} is refused.
     */
    public static void write(Path target, Map<String, String> digests) {
        byte[] bytes = format(digests).getBytes(StandardCharsets.UTF_8);
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
     * Reads and checks a sidecar strictly: a JSON object with exactly the five fields, this format, version,
     * algorithm and chunk size, and every digest 64 lower-case hex digits. Returns table name to digest.
     * Throws {@link CheckpointException} naming the file and the problem.
     */
    public static Map<String, String> read(Path sidecar) {
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
        for (Object key : doc.keySet()) {
            if (!FIELDS.contains(key)) {
                throw new CheckpointException(where + ": unexpected field '" + key
                        + "' (expected format, version, algorithm, chunk_bytes, tables)");
            }
        }
        expect(where, doc, "format", FORMAT);
        expect(where, doc, "version", (long) VERSION);
        expect(where, doc, "algorithm", TreeDigest.ALGORITHM);
        expect(where, doc, "chunk_bytes", TreeDigest.CHUNK);
        if (!(doc.get("tables") instanceof Map<?, ?> tables)) {
            throw new CheckpointException(where + ": 'tables' is not an object of table name to digest but "
                    + SafetensorsHeader.kind(doc.get("tables")));
        }
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<?, ?> e : tables.entrySet()) {
            String name = (String) e.getKey();
            if (name.isEmpty()) {
                throw new CheckpointException(where + ": a table has an empty name");
            }
            if (!(e.getValue() instanceof String hex) || !TreeDigest.isHex(hex)) {
                throw new CheckpointException(where + ": table " + Limits.quoted(name) + ": digest is "
                        + SafetensorsHeader.kind(e.getValue()) + ", not 64 lower-case hex digits");
            }
            out.put(name, hex);
        }
        return Collections.unmodifiableMap(out);
    }

    private static void expect(String where, Map<?, ?> doc, String field, Object value) {
        if (!doc.containsKey(field)) {
            throw new CheckpointException(where + ": not a digest sidecar: no '" + field + "'");
        }
        Object v = doc.get(field);
        if (!value.equals(v)) {
            throw new CheckpointException(where + ": '" + field + "' is " + SafetensorsHeader.kind(v) + ", this build"
                    + " reads only " + (value instanceof String ? "\"" + value + "\"" : value));
        }
    }
}
