package io.engramhost.util;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class BytesTest {
    @Test
    void shouldFormatWithOneDecimalInTheLargestUnit() {
        assertEquals("0 B", Bytes.format(0));
        assertEquals("1023 B", Bytes.format(1023));
        assertEquals("1.0 KiB", Bytes.format(1024));
        assertEquals("512.0 KiB", Bytes.format(512 * Bytes.KiB));
        assertEquals("2.0 MiB", Bytes.format(2 * Bytes.MiB));
        assertEquals("1.5 GiB", Bytes.format(3L << 29));
        assertEquals("189.0 GiB", Bytes.format(189 * Bytes.GiB));
        assertEquals("16.0 TiB", Bytes.format(16 * Bytes.TiB));
        assertEquals("1.0 PiB", Bytes.format(1L << 50));
        assertEquals("8.0 EiB", Bytes.format(Long.MAX_VALUE));
        assertEquals("-1.5 GiB", Bytes.format(-(3L << 29)));
        assertEquals("-100 B", Bytes.format(-100));
        assertEquals("-8.0 EiB", Bytes.format(Long.MIN_VALUE));
    }

    @Test
    void shouldSayPageSizesExactly() {
        assertEquals("4 KiB", Bytes.exact(4096));
        assertEquals("64 KiB", Bytes.exact(64 * Bytes.KiB));
        assertEquals("2 MiB", Bytes.exact(2 * Bytes.MiB));
        assertEquals("512 MiB", Bytes.exact(512 * Bytes.MiB));
        assertEquals("1536 MiB", Bytes.exact(1536 * Bytes.MiB));
        assertEquals("1 GiB", Bytes.exact(Bytes.GiB));
        assertEquals("16 GiB", Bytes.exact(16 * Bytes.GiB));
        assertEquals("5000 B", Bytes.exact(5000));
        assertEquals("0 B", Bytes.exact(0));
    }

    @Test
    void shouldGiveRates() {
        assertEquals("2.00 GiB/s", Bytes.gibPerSecond(4 * Bytes.GiB, 2.0));
        assertEquals("-", Bytes.gibPerSecond(4 * Bytes.GiB, 0));
    }

    @Test
    void shouldRoundUpToAnyGranularity() {
        assertEquals(4L << 20, Bytes.roundUp((2L << 20) + 1, 2L << 20));
        assertEquals(2L << 20, Bytes.roundUp(2L << 20, 2L << 20));
        assertEquals(0, Bytes.roundUp(0, 4096));
        assertEquals(3000, Bytes.roundUp(2001, 1000));
        assertEquals(-4, Bytes.roundUp(-5, 4));
        assertThrows(IllegalArgumentException.class, () -> Bytes.roundUp(1, 0));
        assertThrows(ArithmeticException.class, () -> Bytes.roundUp(Long.MAX_VALUE, 4096));
    }
}
