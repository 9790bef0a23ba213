package io.engramhost.checkpoint;

import static io.engramhost.checkpoint.RawSafetensors.tensor;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SafetensorsFileTest {
    @TempDir
    Path dir;

    private Path file() {
        return dir.resolve("model-00001.safetensors");
    }

    private String fail(String header, int dataBytes) {
        Path f = RawSafetensors.write(file(), header, dataBytes);
        return assertThrows(CheckpointException.class, () -> SafetensorsFile.open(f)).getMessage();
    }

    private String at() {
        return file() + ": ";
    }

    private String tensorAt(String name) {
        return file() + ": tensor '" + name + "': ";
    }

    @Test
    void shouldOpenAValidFileAndExposeEveryTensor() throws Exception {
        String header = "{\"__metadata__\":{\"format\":\"pt\"}," + tensor("w", "F8_E4M3", "[10,256]", 0, 2560) + ","
                + tensor("s", "F8_E8M0", "[10,8]", 2560, 2640) + "," + tensor("scalar", "F32", "[]", 2640, 2644) + ","
                + tensor("empty", "BF16", "[0,4]", 2644, 2644) + "}   ";
        Path f = RawSafetensors.write(file(), header, 2644);
        SafetensorsFile st = SafetensorsFile.open(f);
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        assertEquals(8 + h.length + 2644, st.fileSize());
        assertEquals(h.length, st.headerLength());
        assertEquals(8 + h.length, st.dataOffset());
        assertEquals(2644, st.dataLength());
        assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(h), st.headerSha256());
        assertEquals(HexFormat.of().formatHex(st.headerSha256()), st.headerSha256Hex());
        assertEquals(Map.of("format", "pt"), st.metadata());
        assertEquals(List.of("empty", "s", "scalar", "w"), st.tensors().stream().map(TensorInfo::name).toList());
        TensorInfo w = st.tensor("w");
        assertEquals(new TensorInfo("w", DType.F8_E4M3, new long[] {10, 256}, f, 8 + h.length, 2560), w);
        assertEquals(8 + h.length + 2640, st.tensor("scalar").offset());
        assertEquals(4, st.tensor("scalar").length());
        assertEquals(0, st.tensor("empty").length());
        assertNull(st.tensor("absent"));
        assertEquals("model-00001.safetensors", st.fileName());
    }

    @Test
    void shouldAcceptAnEmptyHeaderWithNoData() {
        SafetensorsFile st = SafetensorsFile.open(RawSafetensors.write(file(), "{}", 0));
        assertEquals(List.of(), st.tensors());
        assertEquals(Map.of(), st.metadata());
    }

    @Test
    void shouldRefuseBadHeaderLengths() throws Exception {
        Files.write(file(), new byte[] {1, 0, 0});
        assertEquals(at() + "file is 3 bytes, too short for the 8-byte header length",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
        byte[] h = "{}".getBytes(StandardCharsets.UTF_8);
        RawSafetensors.write(file(), (100L << 20) + 1, h, new byte[0]);
        assertEquals(at() + "header length 104857601 exceeds the limit of 104857600 bytes (100 MiB)",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
        RawSafetensors.write(file(), -1L, h, new byte[0]);
        assertEquals(at() + "header length 18446744073709551615 exceeds the limit of 104857600 bytes (100 MiB)",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
        RawSafetensors.write(file(), 3, h, new byte[0]);
        assertEquals(at() + "header length 3 runs past the end of the file (10 bytes)",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
    }

    @Test
    void shouldSayAFileThatIsNotSafetensorsIsNot() throws Exception {
        Files.writeString(file(), "# Engram notes\nnot a checkpoint at all\n");
        assertEquals(at() + "not a safetensors file (its first 8 bytes, \"# Engram\" = 2320456e6772616d, are not a"
                + " header length followed by a JSON object): give a .safetensors file, an index or a model directory",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
        Files.write(file(), new byte[] {(byte) 0xff, 0, 0, 0, 0, 0, 0, (byte) 0x80});
        assertEquals(at() + "not a safetensors file (its first 8 bytes, \"........\" = ff00000000000080, are not a"
                + " header length followed by a JSON object): give a .safetensors file, an index or a model directory",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
        // a length that runs past the end, and no JSON after it
        Files.write(file(), new byte[] {100, 0, 0, 0, 0, 0, 0, 0, 'x', 'y'});
        assertTrue(assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage()
                .startsWith(at() + "not a safetensors file (its first 8 bytes, \"d.......\" = 6400000000000000"));
    }

    @Test
    void shouldRefuseHeadersThatAreNotAJsonObject() {
        assertEquals(at() + "header JSON at byte 5 (file offset 13): unexpected '1', expected ':' after key",
                fail("{\"a\" 1}", 0));
        assertEquals(at() + "header JSON at byte 0 (file offset 8): unexpected end of input, expected a value",
                fail("", 0));
        assertEquals(at() + "header is not a JSON object", fail("[]", 0));
        RawSafetensors.write(file(), 5, new byte[] {'{', '"', (byte) 0xff, '"', '}'}, new byte[0]);
        assertEquals(at() + "header JSON at byte 2 (file offset 10): invalid UTF-8 byte 0xff",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(file())).getMessage());
    }

    @Test
    void shouldRefuseDuplicateTensorNames() {
        String header = "{" + tensor("t", "U8", "[1]", 0, 1) + "," + tensor("t", "U8", "[1]", 1, 2) + "}";
        int second = header.lastIndexOf("\"t\"");
        assertEquals(at() + "header JSON at byte " + second + " (file offset " + (8 + second) + "): duplicate key \"t\"",
                fail(header, 2));
    }

    @Test
    void shouldRefuseBadMetadata() {
        assertEquals(at() + "__metadata__ is not an object but a list", fail("{\"__metadata__\":[]}", 0));
        assertEquals(at() + "__metadata__ 'n' is not a string but the number 1",
                fail("{\"__metadata__\":{\"a\":\"b\",\"n\":1}}", 0));
    }

    @Test
    void shouldRefuseMalformedTensorEntries() {
        assertEquals(tensorAt("t") + "entry is not an object but the string \"x\"", fail("{\"t\":\"x\"}", 0));
        assertEquals(file() + ": a tensor has an empty name", fail("{" + tensor("", "U8", "[1]", 0, 1) + "}", 1));
        // a name that would start a line of its own, or reach a terminal, wherever it is printed
        assertEquals(tensorAt("t\\n2026 engram-host: forged\\u001b[2J") + "its name holds a control character or a"
                + " line separator, which no tensor name may; export the file again with printable names",
                fail("{" + tensor("t\\n2026 engram-host: forged\\u001b[2J", "U8", "[1]", 0, 1) + "}", 1));
        assertEquals(tensorAt("t\\u2028u") + "its name holds a control character or a line separator, which no"
                + " tensor name may; export the file again with printable names",
                fail("{" + tensor("t\\u2028u", "U8", "[1]", 0, 1) + "}", 1));
        assertEquals(tensorAt("t") + "unexpected field 'extra' (expected dtype, shape, data_offsets)",
                fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":0}}", 1));
        assertEquals(tensorAt("t") + "missing 'dtype'", fail("{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
        assertEquals(tensorAt("t") + "missing 'shape'", fail("{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1));
        assertEquals(tensorAt("t") + "missing 'data_offsets'", fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1));
    }

    @Test
    void shouldRefuseBadDtypes() {
        assertEquals(tensorAt("t") + "dtype is not a string but the number 8",
                fail("{\"t\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
        String unknown = fail("{" + tensor("t", "F8_E4M3FN", "[1]", 0, 1) + "}", 1);
        assertEquals(tensorAt("t") + "unknown dtype 'F8_E4M3FN' (known: ", unknown.substring(0, unknown.indexOf('(') + 8));
    }

    @Test
    void shouldRefuseBadShapes() {
        assertEquals(tensorAt("t") + "shape is not a list of non-negative integers but the number 1",
                fail("{" + tensor("t", "U8", "1", 0, 1) + "}", 1));
        assertEquals(tensorAt("t") + "shape is not a list of non-negative integers: element 1 is -1",
                fail("{" + tensor("t", "U8", "[1,-1]", 0, 1) + "}", 1));
        assertEquals(tensorAt("t") + "shape is not a list of non-negative integers: element 0 is the number 1.5",
                fail("{" + tensor("t", "U8", "[1.5]", 0, 1) + "}", 1));
        assertEquals(tensorAt("t") + "shape is not a list of non-negative integers: element 0 is the string \"1\"",
                fail("{" + tensor("t", "U8", "[\"1\"]", 0, 1) + "}", 1));
        assertEquals(tensorAt("t") + "shape [4294967296, 4294967296] has more than 2^63 elements",
                fail("{" + tensor("t", "U8", "[4294967296,4294967296]", 0, 1) + "}", 1));
    }

    @Test
    void shouldRefuseBadDataOffsets() {
        assertEquals(tensorAt("t") + "data_offsets has 3 elements, expected 2",
                fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1));
        assertEquals(tensorAt("t") + "data_offsets is not a list of 2 non-negative integers: element 0 is -1",
                fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1));
        assertEquals(tensorAt("t") + "data_offsets is not a list of 2 non-negative integers but null",
                fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":null}}", 1));
        assertEquals(tensorAt("t") + "data_offsets [2, 1] end before they begin",
                fail("{" + tensor("t", "U8", "[1]", 2, 1) + "}", 2));
        assertEquals(tensorAt("t") + "data_offsets [0, 5] end past the data section (4 bytes)",
                fail("{" + tensor("t", "U8", "[5]", 0, 5) + "}", 4));
    }

    @Test
    void shouldRefuseSizesThatDisagreeWithDtypeAndShape() {
        assertEquals(tensorAt("engram.layers.1.embedding.weight")
                        + "F8_E4M3 [10, 256] needs 2560 bytes but data_offsets give 2559",
                fail("{" + tensor("engram.layers.1.embedding.weight", "F8_E4M3", "[10,256]", 0, 2559) + "}", 2559));
        assertEquals(tensorAt("s") + "F32 [] needs 4 bytes but data_offsets give 0",
                fail("{" + tensor("s", "F32", "[]", 0, 0) + "}", 0));
        assertEquals(tensorAt("p") + "F4 [3] has 3 elements of 4 bits = 12 bits, not a whole number of bytes",
                fail("{" + tensor("p", "F4", "[3]", 0, 2) + "}", 2));
        assertEquals(tensorAt("p") + "F6_E3M2 [4] needs 3 bytes but data_offsets give 4",
                fail("{" + tensor("p", "F6_E3M2", "[4]", 0, 4) + "}", 4));
    }

    @Test
    void shouldRefuseOverlapsHolesAndUncoveredBytes() {
        assertEquals(tensorAt("b") + "data_offsets [2, 6] overlap tensor 'a' [0, 4]",
                fail("{" + tensor("a", "U8", "[4]", 0, 4) + "," + tensor("b", "U8", "[4]", 2, 6) + "}", 6));
        assertEquals(tensorAt("b") + "data_offsets [0, 4] overlap tensor 'a' [0, 4]",
                fail("{" + tensor("a", "U8", "[4]", 0, 4) + "," + tensor("b", "U8", "[4]", 0, 4) + "}", 4));
        assertEquals(tensorAt("e") + "data_offsets [2, 2] overlap tensor 'a' [0, 4]",
                fail("{" + tensor("a", "U8", "[4]", 0, 4) + "," + tensor("e", "U8", "[0]", 2, 2) + "}", 4));
        assertEquals(tensorAt("b") + "data_offsets [5, 9] leave a hole of 1 bytes after tensor 'a'",
                fail("{" + tensor("a", "U8", "[4]", 0, 4) + "," + tensor("b", "U8", "[4]", 5, 9) + "}", 9));
        assertEquals(tensorAt("a") + "data_offsets [3, 7] leave a hole of 3 bytes after the start of the data section",
                fail("{" + tensor("a", "U8", "[4]", 3, 7) + "}", 7));
        assertEquals(at() + "the data section has 6 bytes but the tensors cover 4: 2 bytes at the end belong to no tensor",
                fail("{" + tensor("a", "U8", "[4]", 0, 4) + "}", 6));
        assertEquals(at() + "the data section has 1 bytes but the tensors cover 0: 1 bytes at the end belong to no tensor",
                fail("{}", 1));
    }

    @Test
    void shouldAcceptTensorsListedOutOfOffsetOrder() {
        String header = "{" + tensor("b", "U8", "[4]", 4, 8) + "," + tensor("e", "U8", "[0]", 4, 4) + ","
                + tensor("a", "I32", "[1]", 0, 4) + "}";
        SafetensorsFile st = SafetensorsFile.open(RawSafetensors.write(file(), header, 8));
        assertEquals(List.of("a", "b", "e"), st.tensors().stream().map(TensorInfo::name).toList());
    }

    @Test
    void shouldNameAMissingFile() {
        Path missing = dir.resolve("absent.safetensors");
        assertEquals(missing + ": no such file",
                assertThrows(CheckpointException.class, () -> SafetensorsFile.open(missing)).getMessage());
    }
}
