package io.engramhost.checkpoint;

import io.engramhost.os.RawMemory;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

class ContentDigestTest {
    @TempDir
    Path dir;

    /** Fills native memory with xorshift longs. */
    static void fill(long address, long length, long seed) {
        long x = seed | 1;
        long p = 0;
        for (; p + 8 <= length; p += 8) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            RawMemory.putLong(address + p, x);
        }
        for (; p < length; p++) {
            RawMemory.putByte(address + p, (byte) p);
        }
    }

    @Test
    void shouldBeXxh64OfTheLittleEndianChunkHashes() {
        byte[] data = new byte[2500];
        new Random(4).nextBytes(data);
        long chunk = 1000;
        ByteBuffer hashes = ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN);
        hashes.putLong(Xxh64.hash(data, 0, 1000, 0)).putLong(Xxh64.hash(data, 1000, 1000, 0))
                .putLong(Xxh64.hash(data, 2000, 500, 0));
        assertEquals(Xxh64.hash(hashes.array()),
                ContentDigest.digest(data, RawMemory.BYTE_ARRAY_BASE, data.length, chunk));
        ByteBuffer one = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(Xxh64.hash(data));
        assertEquals(Xxh64.hash(one.array()), ContentDigest.digest(data), "under 64 MiB: one chunk");
        assertEquals(0xEF46DB3751D8E999L, ContentDigest.digest(new byte[0]), "empty: XXH64 of nothing");
        assertEquals("ef46db3751d8e999", ContentDigest.hex(ContentDigest.digest(0, 0)));
    }

    @Test
    @Timeout(60)
    void shouldGiveTheSameValueInParallel() throws Exception {
        long length = 2 * ContentDigest.CHUNK + 12345; // two full chunks and a short one
        try (Mapping m = Posix.mmapAnonymous(length, "digest test")) {
            fill(m.address(), length, 11);
            long sequential = ContentDigest.digest(m.address(), length);
            assertEquals(sequential, ContentDigest.digestParallel(m.address(), length, 3));
            assertEquals(sequential, ContentDigest.digestParallel(m.address(), length, 1));
            ExecutorService pool = Executors.newFixedThreadPool(2);
            try {
                long small = 1 << 20;
                assertEquals(ContentDigest.digest(null, m.address(), length, small),
                        ContentDigest.digestParallel(m.address(), length, small, pool), "many small chunks");
            } finally {
                pool.shutdown();
                pool.awaitTermination(10, TimeUnit.SECONDS);
            }
            RawMemory.putByte(m.address() + length - 1, (byte) 0x5a);
            assertNotEquals(sequential, ContentDigest.digestParallel(m.address(), length, 2), "the last byte counts");
        }
    }

    @Test
    @Timeout(60)
    void shouldDigestAFileRegionLikeTheSameBytesInMemory() throws IOException {
        Path file = CheckpointGenerator.writeSingle(dir, new CheckpointGenerator.Spec(List.of(1), 300_000, 256, 5));
        TensorInfo w = SafetensorsFile.open(file).tensor("engram.layers.1.embedding.weight");
        byte[] bytes = CheckpointGeneratorTest.bytesOf(w);
        assertEquals(ContentDigest.digest(bytes), ContentDigest.digest(file, w.offset(), w.length()));
        assertThrows(IOException.class, () -> ContentDigest.digest(file, Files.size(file) - 10, 20));
    }

    @Test
    void shouldComputeSha256OfNativeMemory() throws Exception {
        long length = (3 << 20) + 7;
        try (Mapping m = Posix.mmapAnonymous(length, "sha test")) {
            fill(m.address(), length, 3);
            byte[] copy = new byte[(int) length];
            RawMemory.copy(null, m.address(), copy, RawMemory.BYTE_ARRAY_BASE, length);
            assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(copy), ContentDigest.sha256(m.address(), length));
        }
        assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(new byte[0]), ContentDigest.sha256(0, 0));
    }

    @Test
    void shouldRefuseBadRanges() {
        assertEquals("null address for 8 bytes",
                assertThrows(IllegalArgumentException.class, () -> ContentDigest.digest(0, 8)).getMessage());
        assertEquals("negative length -1",
                assertThrows(IllegalArgumentException.class, () -> ContentDigest.sha256(4096, -1)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> ContentDigest.digestParallel(4096, 8, 0));
    }
}
