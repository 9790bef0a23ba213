package io.engramhost.store;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.ContentIdentity;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.TableDigests;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The load's check against the digest records (docs/checkpoints.md, "Content identity"): each table a record
 * gives an identity must have the engram digest v1 the record says, which the load computes anyway as it reads;
 * a difference refuses to serve, naming the tensor and the record. It costs one comparison per table. The
 * record's sha256-tree-v1 is checked where it was computed: a seeded table's (docs/seeding.md), and a table the disk
 * filled after a peer's bytes passed the engram digest v1 but not the tree digest ({@link #checkTree}).
 */
final class RecordCheck {
    /** Checks nothing: no table has a record. */
    static final RecordCheck NONE = new RecordCheck(Map.of());

    private record Expected(String engramDigest, String treeDigest, Path record, Path path) {
    }

    private final Map<String, Expected> expected;

    private RecordCheck(Map<String, Expected> expected) {
        this.expected = Map.copyOf(expected);
    }

    /** What {@code identity} (of {@code tables} of {@code checkpoint}) says each table's engram digest v1 is. */
    static RecordCheck of(Checkpoint checkpoint, List<TensorInfo> tables, ContentIdentity identity) {
        Map<String, Expected> out = new LinkedHashMap<>();
        for (TensorInfo t : tables) {
            TableDigests d = identity.table(t.name());
            if (d != null) {
                Path given = checkpoint.givenAs(checkpoint.fileOf(t));
                out.put(t.name(), new Expected(d.engramDigest(), d.treeDigest(), DigestSidecar.locationFor(given),
                        given));
            }
        }
        return new RecordCheck(out);
    }

    /** How many tables the records cover. */
    int tables() {
        return expected.size();
    }

    /** The engram digest v1 {@code t}'s record says it has, or null when no record gives it one. */
    Long expectedDigest(TensorInfo t) {
        Expected e = expected.get(t.name());
        return e == null ? null : Long.parseUnsignedLong(e.engramDigest(), 16);
    }

    /** The sha256-tree-v1 (32 bytes) {@code t}'s record says it has, or null when no record gives it one. */
    byte[] expectedTree(TensorInfo t) {
        Expected e = expected.get(t.name());
        return e == null ? null : HexFormat.of().parseHex(e.treeDigest());
    }

    /**
     * Refuses {@code t} when its bytes, of sha256-tree-v1 {@code tree}, are not what its record says; {@code why}
     * says why it was computed.
     */
    void checkTree(TensorInfo t, byte[] tree, String why) {
        Expected e = expected.get(t.name());
        if (e == null) {
            return;
        }
        String actual = TreeDigest.hex(tree);
        if (!actual.equals(e.treeDigest())) {
            throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': its bytes have "
                    + TreeDigest.ALGORITHM + " " + actual + ", but the digest record " + e.record() + " says "
                    + e.treeDigest() + " (" + why + "); refusing to serve it: restore the file, or if it changed on"
                    + " purpose write the record again with engram-host inspect --write-digests " + e.path());
        }
    }

    /** Refuses {@code t} when its bytes, read with engram digest v1 {@code digest}, are not what its record says. */
    void check(TensorInfo t, long digest) {
        Expected e = expected.get(t.name());
        if (e == null) {
            return;
        }
        String actual = ContentDigest.hex(digest);
        if (!actual.equals(e.engramDigest())) {
            throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': its bytes have engram digest v1 "
                    + actual + ", but the digest record " + e.record() + " says " + e.engramDigest()
                    + "; refusing to serve it: restore the file, or if it changed on purpose write the record again"
                    + " with engram-host inspect --write-digests " + e.path());
        }
    }
}
