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
 * (base name, size, SHA-256 of its header, and its content SHA-256 when it is a Hugging Face snapshot file) and
 * each table (name, dtype, shape, bytes, and its digests when a digest record holds it). No paths, no mtimes:
 * the same checkpoint copied elsewhere has the same fingerprint. The constructor puts it in canonical form
 * (patterns sorted and distinct, [] read as [*], files and tables sorted by name in code point order), and
 * {@link #canonicalBytes()} is its one binary form: version 1 without content identity, exactly as earlier builds
 * encode it, version 2 with (docs/checkpoints.md, "Fingerprint").
 */
public record Fingerprint(int layoutVersion, String backend, List<String> patterns, List<FileEntry> files,
        List<Table> tables) {

    /** Version of the table layout the fingerprint describes; bump when the served layout changes. */
    public static final int LAYOUT_VERSION = 1;

    /**
     * One checkpoint file: base name, size in bytes, SHA-256 of its raw header as 64 lower-case hex digits, and
     * {@code contentSha256}, the SHA-256 of the whole file (64 lower-case hex digits), or null when it has none.
     */
    public record FileEntry(String name, long size, String headerSha256, String contentSha256) {
        public FileEntry {
            Objects.requireNonNull(name, "name");
            if (size < 0) {
                throw new IllegalArgumentException("file '" + name + "': negative size " + size);
            }
            if (!TreeDigest.isHex(headerSha256)) {
                throw new IllegalArgumentException("file '" + name + "': header SHA-256 must be 64 lower-case hex"
                        + " digits, was " + headerSha256);
            }
            if (contentSha256 != null && !TreeDigest.isHex(contentSha256)) {
                throw new IllegalArgumentException("file '" + name + "': content SHA-256 must be 64 lower-case hex"
                        + " digits, was " + contentSha256);
            }
        }

        /** A file without content identity. */
        public FileEntry(String name, long size, String headerSha256) {
            this(name, size, headerSha256, null);
        }

        public boolean hasContent() {
            return contentSha256 != null;
        }
    }

    /**
     * One table: tensor name, dtype, shape and byte length (which must be dtype x shape), and its digests where a
     * digest record gives them, each null when absent: {@code engramDigest} its engram digest v1 (16 lower-case hex
     * digits, {@link ContentDigest#hex}), {@code treeDigest} its {@value TreeDigest#ALGORITHM} (64).
     */
    public record Table(String name, DType dtype, long[] shape, long bytes, String engramDigest, String treeDigest) {
        public Table {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(dtype, "dtype");
            shape = shape.clone();
            long needed = dtype.byteLength(shape);
            if (bytes != needed) {
                throw new IllegalArgumentException("table '" + name + "': " + dtype + " " + Arrays.toString(shape)
                        + " is " + needed + " bytes, not " + bytes);
            }
            if (engramDigest != null && !ContentDigest.isHex(engramDigest)) {
                throw new IllegalArgumentException("table '" + name + "': engram digest v1 must be 16 lower-case hex"
                        + " digits, was " + engramDigest);
            }
            if (treeDigest != null && !TreeDigest.isHex(treeDigest)) {
                throw new IllegalArgumentException("table '" + name + "': " + TreeDigest.ALGORITHM + " must be 64"
                        + " lower-case hex digits, was " + treeDigest);
            }
        }

        /** A table without content identity. */
        public Table(String name, DType dtype, long[] shape, long bytes) {
            this(name, dtype, shape, bytes, null, null);
        }

        public static Table of(TensorInfo t) {
            return new Table(t.name(), t.dtype(), t.shape(), t.length());
        }

        /** This table with {@code digests} as its identity (null: none). */
        public Table withDigests(TableDigests digests) {
            return digests == null ? new Table(name, dtype, shape, bytes)
                    : new Table(name, dtype, shape, bytes, digests.engramDigest(), digests.treeDigest());
        }

        public boolean hasIdentity() {
            return engramDigest != null || treeDigest != null;
        }

        @Override
        public long[] shape() {
            return shape.clone();
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Table t && name.equals(t.name) && dtype == t.dtype && Arrays.equals(shape, t.shape)
                    && bytes == t.bytes && Objects.equals(engramDigest, t.engramDigest)
                    && Objects.equals(treeDigest, t.treeDigest);
        }

        @Override
        public int hashCode() {
            return Objects.hash(name, dtype, Arrays.hashCode(shape), bytes, engramDigest, treeDigest);
        }

        @Override
        public String toString() {
            return "Table[" + name + " " + dtype + " " + Arrays.toString(shape) + " " + bytes + " bytes"
                    + (engramDigest == null ? "" : ", " + DigestSidecar.ENGRAM_KEY + " " + engramDigest)
                    + (treeDigest == null ? "" : ", " + TreeDigest.ALGORITHM + " " + treeDigest) + "]";
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

    /** The fingerprint of {@code selection} (glob patterns) of {@code checkpoint}, without content identity. */
    public static Fingerprint of(Checkpoint checkpoint, List<String> selection, String backend, int layoutVersion) {
        return of(checkpoint, checkpoint.select(selection), selection, ContentIdentity.NONE, backend, layoutVersion);
    }

    /**
     * The fingerprint of {@code tables} of {@code checkpoint}, selected by {@code patterns}, each file and table
     * with the content identity {@code identity} gives it.
     */
    public static Fingerprint of(Checkpoint checkpoint, List<TensorInfo> tables, List<String> patterns,
            ContentIdentity identity, String backend, int layoutVersion) {
        Map<String, FileEntry> files = new TreeMap<>();
        List<Table> out = new ArrayList<>();
        for (TensorInfo t : tables) {
            SafetensorsFile f = checkpoint.fileOf(t);
            FileEntry entry = new FileEntry(f.fileName(), f.fileSize(), f.headerSha256Hex(), identity.fileSha256(f));
            FileEntry other = files.putIfAbsent(entry.name(), entry);
            if (other != null && !other.equals(entry)) {
                throw new CheckpointException(f.path() + ": another checkpoint file has the same base name;"
                        + " a fingerprint names files by base name");
            }
            out.add(Table.of(t).withDigests(identity.table(t.name())));
        }
        return new Fingerprint(layoutVersion, backend, patterns, new ArrayList<>(files.values()), out);
    }

    /** Whether any file or table carries content identity (then it encodes as version 2). */
    public boolean hasIdentity() {
        return files.stream().anyMatch(FileEntry::hasContent) || tables.stream().anyMatch(Table::hasIdentity);
    }

    /** The canonical little-endian encoding (docs/checkpoints.md, "Encoding"): version 1 or 2. */
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
     * compared only when this expectation names one; selection patterns are not compared (the tables are), but
     * when both the tables' names and the patterns differ, one selection line stands for the tables missing and
     * not expected. Content identity is compared where both sides have it.
     */
    public List<String> differences(Fingerprint actual) {
        return differences(actual, Integer.MAX_VALUE);
    }

    /**
     * Whether an encoded expectation matches an encoded actual fingerprint, as {@link #differences} would judge
     * the two decoded, without decoding the expectation's lists into objects: for expectations too large for that.
     * The layout version and the backend ({@code ""}: any) are read from its head, its patterns are stepped over (a
     * comparison ignores them), and its files and tables are then compared with the actual one's entry by entry,
     * each file's content SHA-256 and each table's digests where both have them, which for canonical encodings of
     * the same versions is comparing them byte for byte. The differences are not listed: one line says which part
     * differs. Either encoding may be of version 1 or 2.
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
            out.add("backend: expected '" + cut(head.backend()) + "', actual '" + mine.backend() + "'");
        }
        if (!FingerprintCodec.sameEntries(expectation, head, actual, mine)) {
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
        CappedList out = new CappedList(limit);
        if (layoutVersion != actual.layoutVersion) {
            out.add("layout version: expected " + layoutVersion + ", actual " + actual.layoutVersion);
        }
        if (!backend.isEmpty() && !backend.equals(actual.backend)) {
            out.add("backend: expected '" + backend + "', actual '" + actual.backend + "'");
        }
        Map<String, Table> mine = index(tables, Table::name);
        Map<String, Table> theirs = index(actual.tables, Table::name);
        boolean selection = !mine.keySet().equals(theirs.keySet()) && !patterns.equals(actual.patterns);
        if (selection) {
            out.add("selection: the daemon serves " + count(actual.tables.size(), "table") + " by "
                    + show(actual.patterns) + "; this expectation selects " + count(tables.size(), "table") + " by "
                    + show(patterns));
        }
        compare(out, "file", index(files, FileEntry::name), index(actual.files, FileEntry::name), true, (e, a) -> {
            List<String> d = new ArrayList<>();
            if (e.size() != a.size()) {
                d.add("size expected " + e.size() + ", actual " + a.size());
            }
            if (!e.headerSha256().equals(a.headerSha256())) {
                d.add("header SHA-256 expected " + e.headerSha256() + ", actual " + a.headerSha256());
            }
            content(d, "SHA-256", e.contentSha256(), a.contentSha256());
            return d;
        });
        compare(out, "table", mine, theirs, !selection, (e, a) -> {
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
            content(d, DigestSidecar.ENGRAM_KEY, e.engramDigest(), a.engramDigest());
            content(d, TreeDigest.ALGORITHM, e.treeDigest(), a.treeDigest());
            return d;
        });
        return out.withCount();
    }

    /**
     * Whether this fingerprint and {@code other} have any content identity in common: a file (by name) with a
     * content SHA-256 on both sides, or a table (by name) with a digest of the same kind on both. When they have
     * none, {@link #differences} compared headers only.
     */
    public boolean sharesIdentityWith(Fingerprint other) {
        Map<String, FileEntry> theirFiles = index(other.files, FileEntry::name);
        for (FileEntry f : files) {
            FileEntry o = theirFiles.get(f.name());
            if (o != null && f.hasContent() && o.hasContent()) {
                return true;
            }
        }
        Map<String, Table> theirTables = index(other.tables, Table::name);
        for (Table t : tables) {
            Table o = theirTables.get(t.name());
            if (o != null && (t.engramDigest() != null && o.engramDigest() != null
                    || t.treeDigest() != null && o.treeDigest() != null)) {
                return true;
            }
        }
        return false;
    }

    /** Adds "content differs: KIND expected E, actual A" when both sides have a value and they differ. */
    private static void content(List<String> out, String kind, String expected, String actual) {
        if (expected != null && actual != null && !expected.equals(actual)) {
            out.add("content differs: " + kind + " expected " + expected + ", actual " + actual);
        }
    }

    /** e.g. {@code [*]}, {@code [layers.1.engram.embed.scale, ... (4 patterns)]}. */
    private static String show(List<String> patterns) {
        return "[" + cut(patterns.get(0)) + (patterns.size() == 1 ? "" : ", ... (" + patterns.size() + " patterns)")
                + "]";
    }

    private static String count(int n, String what) {
        return n + " " + what + (n == 1 ? "" : "s");
    }

    /** A name or pattern for a message: its first 64 characters and "..." when longer. */
    private static String cut(String s) {
        return s.length() > 64 ? s.substring(0, 64) + "..." : s;
    }

    private interface Diff<T> {
        List<String> apply(T expected, T actual);
    }

    private static <T> Map<String, T> index(List<T> items, Function<T, String> name) {
        Map<String, T> m = new LinkedHashMap<>();
        items.forEach(i -> m.put(name.apply(i), i));
        return m;
    }

    /** Each name's differences, in name order; those missing on either side only when {@code unmatched}. */
    private static <T> void compare(List<String> out, String what, Map<String, T> expected, Map<String, T> actual,
            boolean unmatched, Diff<T> diff) {
        TreeSet<String> names = new TreeSet<>(FingerprintCodec::compareNames);
        names.addAll(expected.keySet());
        names.addAll(actual.keySet());
        for (String n : names) {
            T e = expected.get(n);
            T a = actual.get(n);
            if (a == null || e == null) {
                if (unmatched) {
                    out.add(what + " '" + n + "': " + (a == null ? "missing" : "not expected"));
                }
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
