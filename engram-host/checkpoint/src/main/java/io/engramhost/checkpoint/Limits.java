package io.engramhost.checkpoint;

import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The one set of limits on what engram-host serves, checked when a checkpoint is inspected and before a
 * daemon takes its socket (never first at import): a checkpoint that passes here can be described by every
 * message of the wire protocol. They equal the protocol's constants ({@code ProtocolDescriptor}: a test in
 * the daemon module, which sees both, pins them equal; this module does not depend on the protocol's).
 * docs/checkpoints.md, "Limits", is their description.
 */
public final class Limits {
    /** Most bytes of UTF-8 in a table name (a str16 of the protocol: MAX_SHORT_STRING). */
    public static final int MAX_NAME_BYTES = 4096;
    /** Most dimensions of a table (the manifest's u8 rank: MAX_RANK). */
    public static final int MAX_RANK = 16;
    /** Most tables one daemon serves (the manifest's table_count: MAX_TABLES). */
    public static final int MAX_TABLES = 1 << 20;
    /**
     * Most bytes of a canonical fingerprint: the manifest carries it as a blob of at most this much, and an
     * IMPORT's structured expectation is bounded the same (MAX_FINGERPRINT).
     */
    public static final int MAX_FINGERPRINT_BYTES = 16 << 20;
    /** Most bytes of one frame, all its parts together (MAX_FRAME): the manifest must fit in one. */
    public static final long MAX_MANIFEST_BYTES = 1L << 30;
    /** Most regions (fds) in one manifest (MAX_FDS). */
    public static final int MAX_REGIONS = 65536;

    /** The frame header, the fingerprint's SHA-256, the blob length, region_count and table_count. */
    static final long MANIFEST_FIXED_BYTES = 8 + 32 + 4 + 4 + 4;
    /** One region: u8 kind, u64 size, i32 numa_node, i32 device. */
    static final long MANIFEST_REGION_BYTES = 1 + 8 + 4 + 4;
    /**
     * One table, besides its name, dtype and dims: two str16 lengths, u8 rank, u64 bytes, i32 region,
     * u64 offset, u64 digest, u8 kind, i32 numa_node, i32 device.
     */
    static final long MANIFEST_TABLE_BYTES = 2 + 2 + 1 + 8 + 4 + 8 + 8 + 1 + 4 + 4;

    private Limits() {
    }

    /**
     * The fingerprint a daemon serving {@code patterns} (globs; empty: every tensor) of {@code checkpoint} with
     * {@code backend} would have, without content identity, after checking the selected tables and that
     * fingerprint against every limit ({@link #check}). {@link ServedSelection#of} applies the selection's rules
     * and the content identity too.
     */
    public static Fingerprint checkServed(Checkpoint checkpoint, List<String> patterns, String backend) {
        return checkServed(checkpoint, Selection.ofPatterns(checkpoint, patterns), ContentIdentity.NONE, backend);
    }

    /**
     * The fingerprint a daemon serving {@code selection} of {@code checkpoint} with {@code backend} would have,
     * its files and tables carrying {@code identity}, after checking the selected tables and that fingerprint
     * against every limit ({@link #check}). What {@code inspect} and {@code serve} both call (through
     * {@link ServedSelection#of}), so they agree.
     */
    public static Fingerprint checkServed(Checkpoint checkpoint, Selection selection, ContentIdentity identity,
            String backend) {
        Fingerprint fingerprint = Fingerprint.of(checkpoint, selection.tensors(), selection.patterns(), identity,
                backend, Fingerprint.LAYOUT_VERSION);
        check(selection.tensors(), fingerprint);
        return fingerprint;
    }

    /**
     * Checks {@code tables} (everything a daemon would serve, host and device tables together) and their
     * fingerprint against every limit; throws one {@link CheckpointException} line naming the file, the
     * table where there is one, the value and the limit. The order: table count, then per table (by name)
     * name length and rank, then the fingerprint's size, then the manifest's.
     */
    public static void check(List<TensorInfo> tables, Fingerprint fingerprint) {
        checkTableCount(tables.size());
        for (TensorInfo t : tables) {
            checkTable(t);
        }
        int fingerprintBytes = fingerprint.canonicalBytes().length;
        checkFingerprintBytes(fingerprintBytes, tables.size());
        checkManifestBytes(manifestBytesBound(tables, fingerprintBytes), tables.size());
    }

    static void checkTableCount(long count) {
        if (count > MAX_TABLES) {
            throw new CheckpointException(count + " tables selected, over the limit of " + MAX_TABLES
                    + " (docs/checkpoints.md, Limits)");
        }
    }

    static void checkTable(TensorInfo t) {
        int nameBytes = t.name().getBytes(StandardCharsets.UTF_8).length;
        if (nameBytes > MAX_NAME_BYTES) {
            throw new CheckpointException(t.file() + ": tensor " + quoted(t.name()) + ": the name is " + nameBytes
                    + " bytes of UTF-8, over the limit of " + MAX_NAME_BYTES + " (docs/checkpoints.md, Limits)");
        }
        if (t.rank() > MAX_RANK) {
            throw new CheckpointException(t.file() + ": tensor " + quoted(t.name()) + ": rank " + t.rank()
                    + " (" + t.describe() + ") is over the limit of " + MAX_RANK + " (docs/checkpoints.md, Limits)");
        }
    }

    static void checkFingerprintBytes(long bytes, int tables) {
        if (bytes > MAX_FINGERPRINT_BYTES) {
            throw new CheckpointException("the fingerprint of the " + tables + " selected tables is " + bytes
                    + " bytes, over the limit of " + MAX_FINGERPRINT_BYTES + " (16 MiB) that a manifest and an"
                    + " expectation carry; serve fewer tables or shorter names (docs/checkpoints.md, Limits)");
        }
    }

    static void checkManifestBytes(long bytes, int tables) {
        if (bytes > MAX_MANIFEST_BYTES) {
            throw new CheckpointException("the manifest of the " + tables + " selected tables could take " + bytes
                    + " bytes, over the limit of " + MAX_MANIFEST_BYTES + " (1 GiB, one frame)"
                    + " (docs/checkpoints.md, Limits)");
        }
    }

    /** Refuses more regions (fds) than one manifest can carry. */
    public static void checkRegions(long regions) {
        if (regions > MAX_REGIONS) {
            throw new CheckpointException("the tables need " + regions + " regions (fds), over the limit of "
                    + MAX_REGIONS + " in one manifest: serve fewer tables (--tables), or with --backend cuda-vmm a"
                    + " larger --region-max (docs/checkpoints.md, Limits)");
        }
    }

    /**
     * Once the regions are planned: {@code regions} against the limit, and the manifest's bound with that many regions
     * ({@link #manifestBytesBound} counts one a non-empty table; a cuda-vmm table over a run of regions has more).
     */
    public static void checkManifest(List<TensorInfo> tables, Fingerprint fingerprint, long regions) {
        checkRegions(regions);
        checkManifestBytes(manifestBytesBound(tables, fingerprint.canonicalBytes().length, regions), tables.size());
    }

    /** {@link #manifestBytesBound(List, long)} with {@code regions} regions where there are more than one a table. */
    static long manifestBytesBound(List<TensorInfo> tables, long fingerprintBytes, long regions) {
        long nonEmpty = tables.stream().filter(t -> t.length() > 0).count();
        return manifestBytesBound(tables, fingerprintBytes) + Math.max(0, regions - nonEmpty) * MANIFEST_REGION_BYTES;
    }

    /**
     * An upper bound on the bytes of a manifest that lists {@code tables}, with one region a non-empty table (the
     * most there are unless a cuda-vmm table lies in a run of regions: {@link #checkManifest} adds those): the fixed
     * part, the fingerprint blob, the regions, and every table entry with its name, dtype and dims.
     */
    public static long manifestBytesBound(List<TensorInfo> tables, long fingerprintBytes) {
        long n = MANIFEST_FIXED_BYTES + fingerprintBytes;
        for (TensorInfo t : tables) {
            n += (t.length() > 0 ? MANIFEST_REGION_BYTES : 0) + MANIFEST_TABLE_BYTES
                    + t.name().getBytes(StandardCharsets.UTF_8).length + t.dtype().name().length() + 8L * t.rank();
        }
        return n;
    }

    /** A name quoted for a message; a long one cut to its first 64 characters, with its length. */
    static String quoted(String name) {
        if (name.codePointCount(0, name.length()) <= 80) {
            return "'" + name + "'";
        }
        return "'" + name.substring(0, name.offsetByCodePoints(0, 64)) + "...' (" + name.length() + " characters)";
    }
}
