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

    @Test
    void shouldParseSizesInBytesAndPowersOf1024InAnyCase() {
        assertEquals(4096, Bytes.parse("4096"));
        assertEquals(4096, Bytes.parse("4096B"));
        assertEquals(4096, Bytes.parse(" 4096 b "));
        assertEquals(4 * Bytes.KiB, Bytes.parse("4k"));
        assertEquals(512 * Bytes.MiB, Bytes.parse("512M"));
        assertEquals(512 * Bytes.MiB, Bytes.parse("512mib"));
        assertEquals(120 * Bytes.GiB, Bytes.parse("120G"));
        assertEquals(120 * Bytes.GiB, Bytes.parse("120g"));
        assertEquals(120 * Bytes.GiB, Bytes.parse("120GiB"));
        assertEquals(120 * Bytes.GiB, Bytes.parse("120GIB"));
        assertEquals(120 * Bytes.GiB, Bytes.parse("120 GiB"));
        assertEquals(3 * Bytes.TiB / 2, Bytes.parse("1.5T"));
        assertEquals(2L << 50, Bytes.parse("2PiB"));
        assertEquals(1, Bytes.parse("1.9"), "a fraction of a byte is dropped");
        assertEquals(Long.MAX_VALUE, Bytes.parse("9223372036854775807"));
    }

    @Test
    void shouldRefuseWhatIsNotAPositiveSizeQuotingIt() {
        assertEquals("'0' is not a positive size", parseError("0"));
        assertEquals("'0G' is not a positive size", parseError("0G"));
        assertEquals("'0.1B' is not a positive size", parseError("0.1B"));
        assertEquals("'-5G' is not a positive size", parseError("-5G"));
        String garbage = "is not a size: give bytes, or a number and a unit as in 120G, 120GiB, 1.5T or 512M (K, M, G,"
                + " T, P or KiB ... PiB, powers of 1024)";
        assertEquals("'lots' " + garbage, parseError("lots"));
        assertEquals("'' " + garbage, parseError(""));
        assertEquals("'' " + garbage, parseError(null));
        assertEquals("'G' " + garbage, parseError("G"));
        assertEquals("'12X' " + garbage, parseError("12X"));
        assertEquals("'1.G' " + garbage, parseError("1.G"));
        assertEquals("'+5G' " + garbage, parseError("+5G"));
        assertEquals("'5 G B' " + garbage, parseError("5 G B"));
        assertEquals("'1e9' " + garbage, parseError("1e9"));
        assertEquals("'120GB' is not a size: GB means powers of 1000 to some and of 1024 to others; write 120G or"
                + " 120GiB (powers of 1024)", parseError("120GB"));
        assertEquals("'512mb' is not a size: mb means powers of 1000 to some and of 1024 to others; write 512m or"
                + " 512MiB (powers of 1024)", parseError("512mb"));
        assertEquals("'9223372036854775808' is over the largest size, 8.0 EiB", parseError("9223372036854775808"));
        assertEquals("'8192P' is over the largest size, 8.0 EiB", parseError("8192P"));
        assertEquals("'99999999999999999999999T' is over the largest size, 8.0 EiB",
                parseError("99999999999999999999999T"));
    }

    private static String parseError(String text) {
        return assertThrows(IllegalArgumentException.class, () -> Bytes.parse(text)).getMessage();
    }
}
