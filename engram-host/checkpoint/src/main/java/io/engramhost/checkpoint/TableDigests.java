package io.engramhost.checkpoint;

/**
 * A table's two content digests, as a digest record of version 2 gives them: {@code engramDigest}, its engram
 * digest v1 as 16 lower-case hex digits ({@link ContentDigest#hex}), and {@code treeDigest}, its
 * {@value TreeDigest#ALGORITHM} as 64 (docs/checkpoints.md, "The digest record, version 2").
 */
public record TableDigests(String engramDigest, String treeDigest) {
    public TableDigests {
        if (!ContentDigest.isHex(engramDigest)) {
            throw new IllegalArgumentException("engram digest v1 '" + engramDigest
                    + "' is not 16 lower-case hex digits");
        }
        if (!TreeDigest.isHex(treeDigest)) {
            throw new IllegalArgumentException(TreeDigest.ALGORITHM + " '" + treeDigest
                    + "' is not 64 lower-case hex digits");
        }
    }

    /** From the digest values themselves. */
    public static TableDigests of(long engramDigest, byte[] treeDigest) {
        return new TableDigests(ContentDigest.hex(engramDigest), TreeDigest.hex(treeDigest));
    }
}
