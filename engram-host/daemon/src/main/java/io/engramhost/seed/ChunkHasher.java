package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.checkpoint.Xxh64;
import io.engramhost.os.RawMemory;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * One seeding stream's hasher (docs/seeding.md, step 5): a range that has just landed, one 64 MiB chunk of the
 * engram digest v1 ({@link ContentDigest#CHUNK}) and so exactly four 16 MiB leaves of the sha256-tree-v1
 * ({@link TreeDigest#CHUNK}), is read once, in pieces small enough to stay in the cache, and each piece goes to both
 * hashes. Not thread-safe: each stream has its own.
 */
final class ChunkHasher {
    /** Bytes copied at a time out of the region. */
    private static final int PIECE = 256 << 10;

    static {
        if (ContentDigest.CHUNK % TreeDigest.CHUNK != 0) {
            throw new IllegalStateException("a chunk of the engram digest must hold whole leaves of the tree");
        }
    }

    private final MessageDigest sha;
    private final byte[] piece = new byte[PIECE];

    ChunkHasher() {
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /**
     * Hashes the chunk {@code index} of a table (its {@code length} bytes at {@code address}, the table's bytes from
     * {@code index * 64 MiB}): puts its leaves' SHA-256 into {@code leaves} (the table's, from leaf {@code index * 4})
     * and returns its XXH64, as {@link ContentDigest#combine} takes it.
     */
    long chunk(long address, int length, int index, byte[][] leaves) {
        Xxh64 xxh = new Xxh64(0);
        int first = Math.toIntExact(index * (ContentDigest.CHUNK / TreeDigest.CHUNK));
        for (long leaf = 0; leaf < length; leaf += TreeDigest.CHUNK) {
            long n = Math.min(TreeDigest.CHUNK, length - leaf);
            sha.reset();
            for (long p = 0; p < n; p += PIECE) {
                int k = (int) Math.min(PIECE, n - p);
                RawMemory.copy(address + leaf + p, piece, 0, k);
                sha.update(piece, 0, k);
                xxh.update(piece, 0, k);
            }
            leaves[first + (int) (leaf / TreeDigest.CHUNK)] = sha.digest();
        }
        return xxh.digest();
    }
}
