package io.engramhost.checkpoint;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;

/**
 * What a set of resident tables was loaded from, so a client can check it maps what it expects: the layout
 * version, the backend ("" = any), the selection patterns, each checkpoint file that holds a selected table
 * (base name, size, SHA-256 of its header) and each table (name, dtype, shape, bytes). No paths, no mtimes:
 * the same checkpoint copied elsewhere has the same fingerprint. The constructor puts it in canonical form
 * (patterns sorted and distinct, [] read as [*], files and tables sorted by name in code point order), and
 * {@link #canonicalBytes()} is its one binary form (docs/checkpoints.md).
 */
public record Fingerprint(int layoutVersion, String backend, List<String> patterns, List<FileEntry> files,
        List<Table> tables) {

    /** Version of the table layout the fingerprint describes; bump when the served layout changes. */
    public static final int LAYOUT_VERSION = 1;

    /** One checkpoint file: base name, size in bytes, SHA-256 of its raw header as 64 lower-case hex digits. */
    public record FileEntry(String name, long size, String headerSha256) {
        public FileEntry {
            Objects.requireNonNull(name, "name");
            if (size < 0) {
                throw new IllegalArgumentException("file '" + name + "': negative size " + size);
            }
            if (headerSha256 == null || !headerSha256.matches("[0-9a-f]{64}")) {
                throw new IllegalArgumentException("file '" + name + "': header SHA-256 must be 64 lower-case hex"
                        + " digits, was " + headerSha256);
            }
        }
    }

    /** One table: tensor name, dtype, shape and byte length (which must be dtype x shape). */
    public record Table(String name, DType dtype, long[] shape, long bytes) {
        public Table {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(dtype, "dtype");
            shape = shape.clone();
            long needed = dtype.byteLength(shape);
            if (bytes != needed) {
                throw new IllegalArgumentException("table '" + name + "': " + dtype + " " + Arrays.toString(shape)
                        + " is " + needed + " bytes, not " + bytes);
            }
        }

        public static Table of(TensorInfo t) {
            return new Table(t.name(), t.dtype(), t.shape(), t.length());
        }

        @Override
        public long[] shape() {
            return shape.clone();
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Table t && name.equals(t.name) && dtype == t.dtype && Arrays.equals(shape, t.shape)
                    && bytes == t.bytes;
        }

        @Override
        public int hashCode() {
            return Objects.hash(name, dtype, Arrays.hashCode(shape), bytes);
        }

        @Override
        public String toString() {
            return "Table[" + name + " " + dtype + " " + Arrays.toString(shape) + " " + bytes + " bytes]";
        }
    }

    public Fingerprint {
        Objects.requireNonNull(backend, "backend");
        TreeSet<String> sorted = new TreeSet<>(FingerprintCodec::compareNames);
        sorted.addAll(patterns);
        patterns = sorted.isEmpty() ? List.of("*") : List.copyOf(sorted);
        files = sortedUnique(files, FileEntry::name, "file");
        tables = sortedUnique(tables, Table::name, "table");
    }

    private static <T> List<T> sortedUnique(List<T> items, Function<T, String> name, String what) {
        List<T> out = new ArrayList<>(items);
        out.sort((a, b) -> FingerprintCodec.compareNames(name.apply(a), name.apply(b)));
        for (int i = 1; i < out.size(); i++) {
            if (name.apply(out.get(i)).equals(name.apply(out.get(i - 1)))) {
                throw new IllegalArgumentException("two " + what + "s named '" + name.apply(out.get(i)) + "'");
            }
        }
        return List.copyOf(out);
    }

    /** The fingerprint of {@code selection} (glob patterns) of {@code checkpoint}. */
    public static Fingerprint of(Checkpoint checkpoint, List<String> selection, String backend, int layoutVersion) {
        List<TensorInfo> chosen = checkpoint.select(selection);
        Map<String, FileEntry> files = new TreeMap<>();
        List<Table> tables = new ArrayList<>();
        for (TensorInfo t : chosen) {
            SafetensorsFile f = checkpoint.fileOf(t);
            FileEntry entry = new FileEntry(f.fileName(), f.fileSize(), f.headerSha256Hex());
            FileEntry other = files.putIfAbsent(entry.name(), entry);
            if (other != null && !other.equals(entry)) {
                throw new CheckpointException(f.path() + ": another checkpoint file has the same base name;"
                        + " a fingerprint names files by base name");
            }
            tables.add(Table.of(t));
        }
        return new Fingerprint(layoutVersion, backend, selection, new ArrayList<>(files.values()), tables);
    }

    /** The canonical little-endian encoding (docs/checkpoints.md, "Fingerprint encoding"). */
    public byte[] canonicalBytes() {
        return FingerprintCodec.encode(this);
    }

    /** Decodes canonical bytes strictly; throws IllegalArgumentException naming the byte offset and problem. */
    public static Fingerprint decode(byte[] bytes) {
        return FingerprintCodec.decode(bytes);
    }

    /** SHA-256 of {@link #canonicalBytes()}, lower-case hex. */
    public String sha256Hex() {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(canonicalBytes()));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /**
     * How {@code actual} differs from this expectation, one line each; empty when it matches. The backend is
     * compared only when this expectation names one; selection patterns are not compared (the tables are).
     */
    public List<String> differences(Fingerprint actual) {
        return differences(actual, Integer.MAX_VALUE);
    }

    /**
     * Whether an encoded expectation matches an encoded actual fingerprint, as {@link #differences} would judge
     * the two decoded, without decoding the expectation's lists into objects: for expectations too large for that.
     * The layout version and the backend ({@code ""}: any) are read from its head, its patterns are stepped over (a
     * comparison ignores them), and its files and tables must then equal the actual one's byte for byte, which for
     * canonical encodings is the same as equal lists. The differences are not listed: one line says which part
     * differs.
     *
     * @param actual {@link #canonicalBytes()} of the actual fingerprint
     * @throws IllegalArgumentException if the expectation's head is malformed
     */
    public static List<String> differencesFromEncoded(byte[] expectation, byte[] actual) {
        FingerprintCodec.Head head = FingerprintCodec.head(expectation);
        FingerprintCodec.Head mine = FingerprintCodec.head(actual);
        List<String> out = new ArrayList<>();
        if (head.layoutVersion() != mine.layoutVersion()) {
            out.add("layout version: expected " + head.layoutVersion() + ", actual " + mine.layoutVersion());
        }
        if (!head.backend().isEmpty() && !head.backend().equals(mine.backend())) {
            String b = head.backend();
            out.add("backend: expected '" + (b.length() > 64 ? b.substring(0, 64) + "..." : b) + "', actual '"
                    + mine.backend() + "'");
        }
        if (!Arrays.equals(expectation, head.filesAt(), expectation.length, actual, mine.filesAt(), actual.length)) {
            out.add("files or tables differ from the daemon's (an expectation of " + expectation.length + " bytes is"
                    + " compared as a whole, without listing its differences)");
        }
        return out;
    }

    /**
     * The first {@code limit} differences, then one line counting the rest: a bound on what a
     * large, hostile expectation can make the daemon build.
     */
    public List<String> differences(Fingerprint actual, int limit) {
        List<String> out = new CappedList(limit);
        if (layoutVersion != actual.layoutVersion) {
            out.add("layout version: expected " + layoutVersion + ", actual " + actual.layoutVersion);
        }
        if (!backend.isEmpty() && !backend.equals(actual.backend)) {
            out.add("backend: expected '" + backend + "', actual '" + actual.backend + "'");
        }
        compare(out, "file", index(files, FileEntry::name), index(actual.files, FileEntry::name), (e, a) -> {
            List<String> d = new ArrayList<>();
            if (e.size() != a.size()) {
                d.add("size expected " + e.size() + ", actual " + a.size());
            }
            if (!e.headerSha256().equals(a.headerSha256())) {
                d.add("header SHA-256 expected " + e.headerSha256() + ", actual " + a.headerSha256());
            }
            return d;
        });
        compare(out, "table", index(tables, Table::name), index(actual.tables, Table::name), (e, a) -> {
            List<String> d = new ArrayList<>();
            if (e.dtype() != a.dtype()) {
                d.add("dtype expected " + e.dtype() + ", actual " + a.dtype());
            }
            if (!Arrays.equals(e.shape, a.shape)) {
                d.add("shape expected " + Arrays.toString(e.shape) + ", actual " + Arrays.toString(a.shape));
            }
            if (e.bytes() != a.bytes()) {
                d.add("bytes expected " + e.bytes() + ", actual " + a.bytes());
            }
            return d;
        });
        return ((CappedList) out).withCount();
    }

    private interface Diff<T> {
        List<String> apply(T expected, T actual);
    }

    private static <T> Map<String, T> index(List<T> items, Function<T, String> name) {
        Map<String, T> m = new LinkedHashMap<>();
        items.forEach(i -> m.put(name.apply(i), i));
        return m;
    }

    private static <T> void compare(List<String> out, String what, Map<String, T> expected, Map<String, T> actual,
            Diff<T> diff) {
        TreeSet<String> names = new TreeSet<>(expected.keySet());
        names.addAll(actual.keySet());
        for (String n : names) {
            T e = expected.get(n);
            T a = actual.get(n);
            if (a == null) {
                out.add(what + " '" + n + "': missing");
            } else if (e == null) {
                out.add(what + " '" + n + "': not expected");
            } else {
                diff.apply(e, a).forEach(d -> out.add(what + " '" + n + "': " + d));
            }
        }
    }

    /** Keeps the first {@code limit} lines it is given and counts the rest. */
    private static final class CappedList extends ArrayList<String> {
        private static final long serialVersionUID = 1L;
        private final int limit;
        private long dropped;

        CappedList(int limit) {
            this.limit = limit;
        }

        @Override
        public boolean add(String line) {
            if (size() < limit) {
                return super.add(line);
            }
            dropped++;
            return false;
        }

        List<String> withCount() {
            List<String> out = new ArrayList<>(this);
            if (dropped > 0) {
                out.add("... and " + dropped + " more differences");
            }
            return out;
        }
    }
}
