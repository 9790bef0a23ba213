package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SafetensorsWriterTest {
    @TempDir
    Path dir;

    /** Bytes 0, 1, 2, ... shifted by {@code seed}. */
    static byte[] pattern(int length, int seed) {
        byte[] b = new byte[length];
        for (int i = 0; i < length; i++) {
            b[i] = (byte) (i * 31 + seed);
        }
        return b;
    }

    @Test
    void shouldRoundTripEveryDtypeScalarsAndEmptyTensors() throws IOException {
        SafetensorsWriter w = new SafetensorsWriter().metadata("format", "pt").metadata("note", "\"quoted\"");
        Map<String, byte[]> expected = new LinkedHashMap<>();
        int seed = 0;
        for (DType t : DType.values()) {
            long[] shape = {2, 4}; // 8 elements: whole bytes for every width
            byte[] bytes = pattern((int) t.byteLength(shape), seed++);
            w.add("t." + t, t, shape, bytes);
            expected.put("t." + t, bytes);
        }
        w.add("scalar", DType.F64, new long[] {}, pattern(8, 99));
        expected.put("scalar", pattern(8, 99));
        w.add("empty", DType.BF16, new long[] {0, 256}, new byte[0]);
        expected.put("empty", new byte[0]);
        w.add("empty.f4", DType.F4, new long[] {3, 0}, new byte[0]);
        expected.put("empty.f4", new byte[0]);
        Path f = w.write(dir.resolve("all.safetensors"));

        SafetensorsFile st = SafetensorsFile.open(f);
        assertEquals(Map.of("format", "pt", "note", "\"quoted\""), st.metadata());
        assertEquals(0, st.headerLength() % 8, "header padded to 8 bytes");
        assertEquals(w.dataLength(), st.dataLength());
        byte[] file = Files.readAllBytes(f);
        for (Map.Entry<String, byte[]> e : expected.entrySet()) {
            TensorInfo t = st.tensor(e.getKey());
            assertArrayEquals(e.getValue(), Arrays.copyOfRange(file, (int) t.offset(), (int) (t.offset() + t.length())),
                    e.getKey());
        }
        assertArrayEquals(new long[] {}, st.tensor("scalar").shape());
        assertEquals(1, st.tensor("scalar").numel());
        assertEquals(4, st.tensor("t.F4").length(), "8 F4 values pack into 4 bytes");
        assertEquals(6, st.tensor("t.F6_E2M3").length());
    }

    @Test
    void shouldStreamContentAndCheckItsLength() throws IOException {
        SafetensorsWriter w = new SafetensorsWriter().add("big", DType.U16, new long[] {3, 1000}, out -> {
            for (int i = 0; i < 6; i++) {
                out.write(pattern(1000, i));
            }
        });
        SafetensorsFile st = SafetensorsFile.open(w.write(dir.resolve("s.safetensors")));
        assertEquals(6000, st.tensor("big").length());

        SafetensorsWriter tooShort = new SafetensorsWriter().add("t", DType.U8, new long[] {10}, out -> out.write(1));
        IOException shortE = assertThrows(IOException.class, () -> tooShort.write(dir.resolve("short.safetensors")));
        assertEquals("tensor 't': content wrote 1 bytes, expected 10", shortE.getMessage());
        SafetensorsWriter tooLong = new SafetensorsWriter().add("t", DType.U8, new long[] {2}, out -> out.write(new byte[3]));
        IOException longE = assertThrows(IOException.class, () -> tooLong.write(dir.resolve("long.safetensors")));
        assertEquals("tensor 't': content wrote more than 2 bytes", longE.getMessage());
        try (Stream<Path> files = Files.list(dir)) {
            assertEquals(List.of("s.safetensors"), files.map(p -> p.getFileName().toString()).toList(),
                    "a failed write leaves nothing behind");
        }
    }

    @Test
    void shouldRefuseBadDeclarations() {
        SafetensorsWriter w = new SafetensorsWriter().add("a", DType.U8, new long[] {1}, new byte[1]);
        assertEquals("tensor 'a' is already declared", assertThrows(IllegalArgumentException.class,
                () -> w.add("a", DType.U8, new long[] {1}, new byte[1])).getMessage());
        assertEquals("tensor 'b': F32 [2] needs 8 bytes, got 7", assertThrows(IllegalArgumentException.class,
                () -> w.add("b", DType.F32, new long[] {2}, new byte[7])).getMessage());
        assertEquals("F4 [1] has 1 elements of 4 bits = 4 bits, not a whole number of bytes",
                assertThrows(IllegalArgumentException.class,
                        () -> w.add("c", DType.F4, new long[] {1}, new byte[1])).getMessage());
        assertEquals("tensor name '__metadata__' is not allowed", assertThrows(IllegalArgumentException.class,
                () -> w.add("__metadata__", DType.U8, new long[] {0}, new byte[0])).getMessage());
    }

    @Test
    void shouldWriteTheSameBytesEveryTime() throws IOException {
        SafetensorsWriter w = new SafetensorsWriter().add("x", DType.I64, new long[] {2}, pattern(16, 5));
        byte[] a = Files.readAllBytes(w.write(dir.resolve("a.safetensors")));
        byte[] b = Files.readAllBytes(w.write(dir.resolve("b.safetensors")));
        assertArrayEquals(a, b);
        assertTrue(new String(w.header()).startsWith("{\"x\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}"));
    }
}
