package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

class DTypeTest {

    @Test
    void shouldKnowEverySafetensorsDtypeAndItsWidth() {
        Map<String, Integer> expected = new LinkedHashMap<>();
        expected.put("BOOL", 8);
        expected.put("F4", 4);
        expected.put("F6_E2M3", 6);
        expected.put("F6_E3M2", 6);
        expected.put("U8", 8);
        expected.put("I8", 8);
        expected.put("F8_E5M2", 8);
        expected.put("F8_E4M3", 8);
        expected.put("F8_E8M0", 8);
        expected.put("I16", 16);
        expected.put("U16", 16);
        expected.put("F16", 16);
        expected.put("BF16", 16);
        expected.put("I32", 32);
        expected.put("U32", 32);
        expected.put("F32", 32);
        expected.put("C64", 64);
        expected.put("F64", 64);
        expected.put("I64", 64);
        expected.put("U64", 64);
        assertEquals(expected.size(), DType.values().length);
        expected.forEach((name, bits) -> {
            DType t = DType.parse(name);
            assertEquals(name, t.name());
            assertEquals(bits, t.bits(), name);
        });
    }

    @Test
    void shouldRefuseUnknownNamesNamingThem() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> DType.parse("f32"));
        assertTrue(e.getMessage().startsWith("unknown dtype 'f32' (known: BOOL, F4, "), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> DType.parse("F8_E4M3FN"));
        assertThrows(IllegalArgumentException.class, () -> DType.parse(""));
        assertSame(DType.C64, DType.parse("C64"));
    }

    @Test
    void shouldComputeByteLengths() {
        assertEquals(384L * 256, DType.F8_E4M3.byteLength(new long[] {384, 256}));
        assertEquals(384L * 8, DType.F8_E8M0.byteLength(new long[] {384, 8}));
        assertEquals(8 * 2 * 3, DType.C64.byteLength(new long[] {2, 3}));
        assertEquals(2, DType.BF16.byteLength(new long[] {}), "a scalar has one element");
        assertEquals(0, DType.F64.byteLength(new long[] {5, 0, 7}), "a 0 dimension gives 0 bytes");
        assertEquals(0, DType.F4.byteLength(new long[] {0}));
        assertEquals(1, DType.BOOL.byteLength(new long[] {1, 1}));
    }

    @Test
    void shouldPackSubByteDtypesOnlyIntoWholeBytes() {
        assertEquals(2, DType.F4.byteLength(new long[] {4}));
        assertEquals(3, DType.F6_E2M3.byteLength(new long[] {4}));
        assertEquals(6, DType.F6_E3M2.byteLength(new long[] {2, 4}));
        IllegalArgumentException f4 = assertThrows(IllegalArgumentException.class,
                () -> DType.F4.byteLength(new long[] {3}));
        assertEquals("F4 [3] has 3 elements of 4 bits = 12 bits, not a whole number of bytes", f4.getMessage());
        IllegalArgumentException f6 = assertThrows(IllegalArgumentException.class,
                () -> DType.F6_E2M3.byteLength(new long[] {2, 3}));
        assertEquals("F6_E2M3 [2, 3] has 6 elements of 6 bits = 36 bits, not a whole number of bytes",
                f6.getMessage());
        assertThrows(IllegalArgumentException.class, () -> DType.F4.byteLength(new long[] {}), "a lone F4 scalar");
    }

    @Test
    void shouldGuardAgainstOverflow() {
        IllegalArgumentException numel = assertThrows(IllegalArgumentException.class,
                () -> DType.U8.byteLength(new long[] {1L << 32, 1L << 32}));
        assertEquals("shape [4294967296, 4294967296] has more than 2^63 elements", numel.getMessage());
        IllegalArgumentException bits = assertThrows(IllegalArgumentException.class,
                () -> DType.F64.byteLength(new long[] {1L << 60}));
        assertEquals("F64 [1152921504606846976] is larger than 2^63 bits", bits.getMessage());
        assertEquals(0, DType.F64.byteLength(new long[] {Long.MAX_VALUE, Long.MAX_VALUE, 0}),
                "a 0 dimension wins over huge ones");
        IllegalArgumentException negative = assertThrows(IllegalArgumentException.class,
                () -> DType.U8.byteLength(new long[] {2, -1}));
        assertEquals("negative dimension -1 in shape [2, -1]", negative.getMessage());
    }
}
