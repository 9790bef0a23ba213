package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.checkpoint.Xxh64;
import io.engramhost.os.RawMemory;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * One seeding stream's hasher (docs/seeding.md, step 5): a range, one 64 MiB chunk of the engram digest v1
 * ({@link ContentDigest#CHUNK}) and so exactly four 16 MiB leaves of the sha256-tree-v1 ({@link TreeDigest#CHUNK}), is
 * hashed as it lands: each piece the socket has just written ({@link #update}) goes to both hashes while it is still in
 * the cache, and the socket meanwhile takes in the next. Not thread-safe: each stream has its own.
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
    /** The chunk under way (from {@link #begin} to {@link #end}); {@code xxh} null between chunks. */
    private Xxh64 xxh;
    private byte[][] leaves;
    private int firstLeaf;
    private int length;
    private long done;

    ChunkHasher() {
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /**
     * Begins the chunk {@code index} of a table, {@code length} bytes (the table's bytes from {@code index * 64 MiB});
     * {@link #update} then takes its bytes in order, and {@link #end} puts its leaves' SHA-256 into {@code leaves} (the
     * table's, from leaf {@code index * 4}) and returns its XXH64, as {@link ContentDigest#combine} takes it.
     */
    void begin(int index, int length, byte[][] leaves) {
        if (length <= 0 || length > ContentDigest.CHUNK) {
            throw new IllegalArgumentException("a chunk is 1 to " + ContentDigest.CHUNK + " bytes, not " + length);
        }
        this.xxh = new Xxh64(0);
        this.leaves = leaves;
        this.firstLeaf = Math.toIntExact(index * (ContentDigest.CHUNK / TreeDigest.CHUNK));
        this.length = length;
        this.done = 0;
        sha.reset();
    }

    /** The chunk's next {@code n} bytes, at {@code address} (where they have just landed). */
    void update(long address, int n) {
        if (xxh == null || n < 0 || done + n > length) {
            throw new IllegalStateException("update of " + n + " bytes at " + done + " of a chunk of " + length
                    + (xxh == null ? ", none begun" : ""));
        }
        for (long p = 0; p < n; ) {
            long inLeaf = done % TreeDigest.CHUNK;
            int k = (int) Math.min(Math.min(PIECE, n - p), TreeDigest.CHUNK - inLeaf);
            RawMemory.copy(address + p, piece, 0, k);
            sha.update(piece, 0, k);
            xxh.update(piece, 0, k);
            p += k;
            done += k;
            if (done % TreeDigest.CHUNK == 0 || done == length) {
                leaves[firstLeaf + (int) ((done - 1) / TreeDigest.CHUNK)] = sha.digest(); // digest() resets it
            }
        }
    }

    /** Ends the chunk once all its bytes went to {@link #update}: its XXH64; its leaves are in place. */
    long end() {
        if (xxh == null || done != length) {
            throw new IllegalStateException("a chunk of " + length + " bytes ended after " + done);
        }
        long d = xxh.digest();
        xxh = null;
        leaves = null;
        return d;
    }
}
