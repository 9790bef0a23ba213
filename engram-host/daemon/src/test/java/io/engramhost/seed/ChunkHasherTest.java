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
 * digests of the whole table (engram digest v1, sha256-tree-v1), with a last chunk of a partial leaf.
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
                hashes[c] = h.chunk(m.address() + off, (int) Math.min(ContentDigest.CHUNK, length - off), c, leaves);
            }
            assertEquals(ContentDigest.digest(m.address(), length), ContentDigest.combine(hashes));
            assertArrayEquals(TreeDigest.digest(m.address(), length, 1), TreeDigest.rootOf(length, leaves));
            assertThrows(IllegalArgumentException.class, () -> TreeDigest.rootOf(length, new byte[4][]),
                    "a leaf missing");
        }
    }
}
