package io.engramhost.seed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import org.junit.jupiter.api.Test;

/**
 * A seeded table's digests from its chunks hashed one by one, in any order, as the ranges land: both are the
 * digests of the whole table (engram digest v1, sha256-tree-v1), with a last chunk of a partial leaf; and a chunk
 * hashed piece by piece as a socket lands it, in pieces that straddle the 16 MiB leaves, gives the same.
 */
class ChunkHasherTest {
    @Test
    void shouldGiveBothDigestsOfTheWholeTableFromItsChunksInAnyOrder() {
        long length = ContentDigest.CHUNK + 5 * (1L << 20) + 3; // a 64 MiB chunk, then 5 MiB and 3 bytes
        try (Mapping m = Posix.mmapAnonymous(length, "test table")) {
            for (long i = 0; i < length; i += 4093) {
                RawMemory.putByte(m.address() + i, (byte) (i * 131 + (i >> 16)));
            }
            int chunks = 2;
            long[] hashes = new long[chunks];
            byte[][] leaves = new byte[(int) ((length + TreeDigest.CHUNK - 1) / TreeDigest.CHUNK)][];
            ChunkHasher h = new ChunkHasher();
            for (int c = chunks - 1; c >= 0; c--) {
                long off = c * ContentDigest.CHUNK;
                hashes[c] = whole(h, m.address() + off, (int) Math.min(ContentDigest.CHUNK, length - off), c, leaves);
            }
            assertEquals(ContentDigest.digest(m.address(), length), ContentDigest.combine(hashes));
            assertArrayEquals(TreeDigest.digest(m.address(), length, 1), TreeDigest.rootOf(length, leaves));
            assertThrows(IllegalArgumentException.class, () -> TreeDigest.rootOf(length, new byte[4][]),
                    "a leaf missing");
        }
    }

    @Test
    void shouldGiveTheSameDigestsWhenAChunkIsHashedPieceByPieceAsItLands() {
        long length = ContentDigest.CHUNK + 17 * (1L << 20) + 5; // a whole chunk, then one of a leaf and a bit
        try (Mapping m = Posix.mmapAnonymous(length, "test table")) {
            for (long i = 0; i < length; i += 4091) {
                RawMemory.putByte(m.address() + i, (byte) (i * 151 + (i >> 13)));
            }
            int leafCount = (int) ((length + TreeDigest.CHUNK - 1) / TreeDigest.CHUNK);
            byte[][] whole = new byte[leafCount][];
            byte[][] pieces = new byte[leafCount][];
            ChunkHasher h = new ChunkHasher();
            // piece sizes as reads return them: tiny, odd, and larger than a leaf's remainder
            int[] sizes = {1, 4093, (1 << 20) + 7, 3 << 20, 17, (16 << 20) - 1, 256 << 10};
            for (int c = 0; c < 2; c++) {
                long off = c * ContentDigest.CHUNK;
                int len = (int) Math.min(ContentDigest.CHUNK, length - off);
                long expected = whole(h, m.address() + off, len, c, whole);
                h.begin(c, len, pieces);
                int done = 0;
                for (int k = 0; done < len; k++) {
                    int n = Math.min(sizes[k % sizes.length], len - done);
                    h.update(m.address() + off + done, n);
                    done += n;
                }
                assertEquals(expected, h.end(), "chunk " + c + "'s XXH64");
            }
            for (int i = 0; i < leafCount; i++) {
                assertArrayEquals(whole[i], pieces[i], "leaf " + i);
            }
            h.begin(0, 100, pieces);
            h.update(m.address(), 60);
            assertThrows(IllegalStateException.class, h::end, "ended 40 bytes short");
            assertThrows(IllegalStateException.class, () -> h.update(m.address(), 41), "past the chunk's end");
            assertThrows(IllegalArgumentException.class, () -> h.begin(0, 0, pieces), "an empty chunk");
        }
    }

    /** A chunk hashed in one update, as if it had landed at once. */
    private static long whole(ChunkHasher h, long address, int length, int index, byte[][] leaves) {
        h.begin(index, length, leaves);
        h.update(address, length);
        return h.end();
    }
}
