package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.junit.jupiter.api.Test;

class GpuChecksumTest {
    @Test
    void shouldAgreeBetweenNativeMemoryAndByteBufferForEveryTailLength() {
        try (Mapping m = Posix.mmapAnonymous(4096, "checksum test")) {
            for (int length = 0; length <= 64; length++) {
                Patterns.fill(m.address(), length, 7 + length);
                ByteBuffer copy = ByteBuffer.allocate(length);
                for (int i = 0; i < length; i++) {
                    copy.put(i, Patterns.MEMORY.getByte(m.address() + i));
                }
                assertEquals(GpuChecksum.cpu(copy), GpuChecksum.cpu(m.address(), length), "length " + length);
            }
        }
    }

    @Test
    void shouldChangeWhenTwoWordsSwapOrTheLengthGrows() {
        ByteBuffer b = ByteBuffer.allocate(64).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < 8; i++) {
            b.putLong(i * 8, 1000 + i);
        }
        long before = GpuChecksum.cpu(b);
        b.putLong(0, 1001).putLong(8, 1000);
        assertNotEquals(before, GpuChecksum.cpu(b), "position matters");
        ByteBuffer longer = ByteBuffer.allocate(65);
        ByteBuffer shorter = ByteBuffer.allocate(64);
        assertNotEquals(GpuChecksum.cpu(shorter), GpuChecksum.cpu(longer), "a trailing zero byte counts");
    }

    @Test
    void shouldMixWordsAsRotateXorGolden() {
        long w = 0x0123456789abcdefL;
        for (long i : new long[] {0, 1, 63, 64, 65, 1L << 40}) {
            long expected = ((w << (i % 64)) | (w >>> ((64 - i % 64) % 64))) ^ (i * 0x9E3779B97F4A7C15L);
            assertEquals(expected, GpuChecksum.mix(w, i), "word index " + i);
        }
    }

    @Test
    void shouldRejectUnalignedAddress() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> GpuChecksum.cpu(4099, 8));
        assertTrue(e.getMessage().contains("8-byte aligned"), e.getMessage());
    }
}
