package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The content-digest sidecar: where it goes, how it is written and read, and every way it can be wrong. */
@Timeout(60)
class DigestSidecarTest {
    static final String D1 = TreeDigestTest.EMPTY;
    static final String D2 = TreeDigestTest.ABC;

    @TempDir
    Path dir;

    @Test
    void shouldPlaceTheSidecarBesideAFileAndInsideADirectoryOrAnIndexsDirectory() throws Exception {
        Path file = Files.createFile(dir.resolve("m.safetensors"));
        Path index = Files.createFile(dir.resolve("model.safetensors.index.json"));
        assertEquals(dir.resolve("m.safetensors.engram-digests.json"), DigestSidecar.locationFor(file));
        assertEquals(dir.resolve("engram-digests.json"), DigestSidecar.locationFor(index));
        assertEquals(dir.resolve("engram-digests.json"), DigestSidecar.locationFor(dir));
        assertThrows(CheckpointException.class, () -> DigestSidecar.locationFor(dir.resolve("x.bin")));
        assertTrue(DigestSidecar.isSidecar(dir.resolve("m.safetensors.engram-digests.json")));
        assertTrue(DigestSidecar.isSidecar(dir.resolve("engram-digests.json")));
        assertFalse(DigestSidecar.isSidecar(file));
    }

    @Test
    void shouldWriteTheDocumentedFormatAndReadItBack() throws Exception {
        Map<String, String> digests = new LinkedHashMap<>();
        digests.put("b", D2);
        digests.put("a", D1);
        Path target = dir.resolve("m.safetensors.engram-digests.json");
        DigestSidecar.write(target, digests);
        assertEquals("{\"format\":\"engram-content-digests\",\"version\":1,\"algorithm\":\"sha256-tree-v1\","
                + "\"chunk_bytes\":16777216,\"tables\":{\"a\":\"" + D1 + "\",\"b\":\"" + D2 + "\"}}\n",
                Files.readString(target));
        assertEquals(Map.of("a", D1, "b", D2), DigestSidecar.read(target));
        DigestSidecar.write(target, Map.of("a", D2));
        assertEquals(Map.of("a", D2), DigestSidecar.read(target), "rewritten in place by rename");
        try (Stream<Path> left = Files.list(dir)) {
            assertEquals(List.of(target), left.toList(), "no temporary file left");
        }
    }

    static final String E1 = "ef46db3751d8e999";
    static final String E2 = "0123456789abcdef";

    @Test
    void shouldWriteVersion2WithBothDigestsAndReadBothVersions() throws Exception {
        Map<String, TableDigests> digests = new LinkedHashMap<>();
        digests.put("layers.14.engram.embed.weight", new TableDigests(E2, D2));
        digests.put("layers.1.engram.embed.scale", new TableDigests(E1, D1));
        Path target = dir.resolve("engram-digests.json");
        DigestSidecar.writeRecord(target, digests);
        assertEquals("{\"format\":\"engram-content-digests\",\"version\":2,\"chunk_bytes\":16777216,\"tables\":{"
                + "\"layers.1.engram.embed.scale\":{\"engram-digest-v1\":\"" + E1 + "\",\"sha256-tree-v1\":\"" + D1 + "\"},"
                + "\"layers.14.engram.embed.weight\":{\"engram-digest-v1\":\"" + E2 + "\",\"sha256-tree-v1\":\"" + D2
                + "\"}}}\n", Files.readString(target));
        DigestSidecar.Record record = DigestSidecar.readRecord(target);
        assertEquals(2, record.version());
        assertEquals(digests, record.both());
        assertEquals(Map.of("layers.1.engram.embed.scale", D1, "layers.14.engram.embed.weight", D2),
                DigestSidecar.read(target), "the tree digests, for verify and --verify-content");
        DigestSidecar.write(target, Map.of("a", D1));
        DigestSidecar.Record v1 = DigestSidecar.readRecord(target);
        assertEquals(1, v1.version());
        assertEquals(Map.of("a", D1), v1.treeDigests());
        assertEquals(Map.of(), v1.both(), "version 1 holds no engram digest");
    }

    private static String v2(String tables) {
        return "{\"format\":\"engram-content-digests\",\"version\":2,\"chunk_bytes\":16777216,\"tables\":" + tables + "}";
    }

    @Test
    void shouldReadVersion2Strictly() throws Exception {
        String both = "\"engram-digest-v1\":\"" + E1 + "\",\"sha256-tree-v1\":\"" + D1 + "\"";
        assertEquals("table 'a': not an object of engram-digest-v1 and sha256-tree-v1 but the string \"" + D1.substring(0, 40)
                + "...\"", readError(v2("{\"a\":\"" + D1 + "\"}")), "a version 1 table in a version 2 record");
        assertEquals("table 'a': unexpected field 'md5' (expected engram-digest-v1, sha256-tree-v1)",
                readError(v2("{\"a\":{" + both + ",\"md5\":\"x\"}}")));
        assertEquals("table 'a': engram-digest-v1 is null, not 16 lower-case hex digits",
                readError(v2("{\"a\":{\"sha256-tree-v1\":\"" + D1 + "\"}}")));
        assertEquals("table 'a': engram-digest-v1 is the string \"EF46DB3751D8E999\", not 16 lower-case hex digits",
                readError(v2("{\"a\":{\"engram-digest-v1\":\"EF46DB3751D8E999\",\"sha256-tree-v1\":\"" + D1 + "\"}}")));
        assertEquals("table 'a': sha256-tree-v1 is the number 5, not 64 lower-case hex digits",
                readError(v2("{\"a\":{\"engram-digest-v1\":\"" + E1 + "\",\"sha256-tree-v1\":5}}")));
        assertEquals("'tables' is not an object of table name to digests but a list", readError(v2("[]")));
        assertEquals("a table has an empty name", readError(v2("{\"\":{" + both + "}}")));
        assertEquals("'chunk_bytes' is the number 1024, this build reads only 16777216", readError(
                v2("{}").replace("16777216", "1024")));
        assertEquals("unexpected field 'extra' (expected format, version, chunk_bytes, tables)",
                readError(v2("{}").replace("{\"format\"", "{\"extra\":1,\"format\"")));
        assertEquals(2, DigestSidecar.readRecord(Files.writeString(dir.resolve("ok.engram-digests.json"),
                v2("{\"a\":{" + both + "}}"))).version());
    }

    @Test
    void shouldComputeBothDigestsOfARecordInOnePassThroughTheOpenFds() throws Exception {
        Path file = new SafetensorsWriter().add("abc", DType.U8, new long[] {3}, "abc".getBytes(StandardCharsets.US_ASCII))
                .add("empty", DType.F32, new long[] {0, 4}, new byte[0]).write(dir.resolve("m.safetensors"));
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            AtomicLong done = new AtomicLong();
            Map<String, TableDigests> d = DigestSidecar.computeRecord(cp, cp.checkpoint().tensors(), 2, done::addAndGet);
            assertEquals(Map.of("abc", new TableDigests(ContentDigest.hex(ContentDigest.digest("abc".getBytes(
                    StandardCharsets.US_ASCII))), D2), "empty", new TableDigests(E1, D1)), d);
            assertEquals(3, done.get());
        }
    }

    @Test
    void shouldRefuseToWriteThroughASymlink() throws Exception {
        Path elsewhere = Files.writeString(dir.resolve("victim"), "keep");
        Path target = Files.createSymbolicLink(dir.resolve("engram-digests.json"), elsewhere);
        CheckpointException e = assertThrows(CheckpointException.class, () -> DigestSidecar.write(target, Map.of("a", D1)));
        assertEquals(target + ": is a symbolic link; refusing to write the digests through it", e.getMessage());
        assertEquals("keep", Files.readString(elsewhere));
        Path dangling = Files.createSymbolicLink(dir.resolve("x.engram-digests.json"), dir.resolve("nowhere"));
        assertThrows(CheckpointException.class, () -> DigestSidecar.write(dangling, Map.of("a", D1)));
        assertFalse(Files.exists(dir.resolve("nowhere")), "a dangling link is not followed to create its target");
        assertThrows(IllegalArgumentException.class, () -> DigestSidecar.write(dir.resolve("y.engram-digests.json"),
                Map.of("a", "ABC")));
        Path directory = Files.createDirectory(dir.resolve("d.engram-digests.json"));
        assertEquals(directory + ": is a directory, not a regular file", assertThrows(CheckpointException.class,
                () -> DigestSidecar.write(directory, Map.of("a", D1))).getMessage());
    }

    private String readError(String text) throws Exception {
        Path p = Files.writeString(dir.resolve("bad.engram-digests.json"), text);
        return assertThrows(CheckpointException.class, () -> DigestSidecar.read(p)).getMessage()
                .substring(p.toString().length() + 2);
    }

    private static String doc(String format, String version, String algorithm, String chunk, String tables) {
        return "{\"format\":" + format + ",\"version\":" + version + ",\"algorithm\":" + algorithm + ",\"chunk_bytes\":"
                + chunk + ",\"tables\":" + tables + "}";
    }

    @Test
    void shouldRefuseMalformedSidecarsWithOneClearLine() throws Exception {
        String ok = "{\"a\":\"" + D1 + "\"}";
        assertEquals("not a digest sidecar: JSON at byte 1: unexpected end of input, expected a string key",
                readError("{"), "truncated");
        assertEquals("not a digest sidecar: not a JSON object but a list", readError("[]"));
        assertEquals("'format' is the string \"other\", this build reads only \"engram-content-digests\"",
                readError(doc("\"other\"", "1", "\"sha256-tree-v1\"", "16777216", ok)));
        assertEquals("'version' is the number 3, this build reads only 1 and 2",
                readError(doc("\"engram-content-digests\"", "3", "\"sha256-tree-v1\"", "16777216", ok)));
        assertEquals("unexpected field 'algorithm' (expected format, version, chunk_bytes, tables)",
                readError(doc("\"engram-content-digests\"", "2", "\"sha256-tree-v1\"", "16777216", ok)),
                "version 2 has no algorithm: each table names its two");
        assertEquals("'algorithm' is the string \"xxh64\", this build reads only \"sha256-tree-v1\"",
                readError(doc("\"engram-content-digests\"", "1", "\"xxh64\"", "16777216", ok)));
        assertEquals("'chunk_bytes' is the number 1024, this build reads only 16777216",
                readError(doc("\"engram-content-digests\"", "1", "\"sha256-tree-v1\"", "1024", ok)));
        assertEquals("'tables' is not an object of table name to digest but a list",
                readError(doc("\"engram-content-digests\"", "1", "\"sha256-tree-v1\"", "16777216", "[]")));
        String upper = readError(doc("\"engram-content-digests\"", "1", "\"sha256-tree-v1\"", "16777216",
                "{\"a\":\"" + D1.toUpperCase(java.util.Locale.ROOT) + "\"}"));
        assertTrue(upper.startsWith("table 'a': digest is the string \"0C4278D9")
                && upper.endsWith("...\", not 64 lower-case hex digits"), upper);
        assertEquals("table 'a': digest is the number 5, not 64 lower-case hex digits",
                readError(doc("\"engram-content-digests\"", "1", "\"sha256-tree-v1\"", "16777216", "{\"a\":5}")));
        assertEquals("a table has an empty name",
                readError(doc("\"engram-content-digests\"", "1", "\"sha256-tree-v1\"", "16777216", "{\"\":\"" + D1 + "\"}")));
        assertEquals("not a digest sidecar: no 'format'", readError("{\"tables\":{}}"));
        assertEquals("unexpected field 'extra' (expected format, version, algorithm, chunk_bytes, tables)",
                readError("{\"extra\":1}"));
        assertTrue(readError(doc("\"engram-content-digests\"", "1", "\"sha256-tree-v1\"", "16777216",
                "{\"a\":\"" + D1 + "\",\"a\":\"" + D2 + "\"}")).contains("duplicate"), "a table listed twice");
        CheckpointException none = assertThrows(CheckpointException.class,
                () -> DigestSidecar.read(dir.resolve("none.engram-digests.json")));
        assertEquals(dir.resolve("none.engram-digests.json") + ": no such file", none.getMessage());
    }

    @Test
    void shouldComputeEveryTablesDigestThroughTheOpenFdsAndRefuseAFileThatChangedMeanwhile() throws Exception {
        Path file = new SafetensorsWriter().add("abc", DType.U8, new long[] {3}, "abc".getBytes(StandardCharsets.US_ASCII))
                .add("empty", DType.F32, new long[] {0, 4}, new byte[0]).write(dir.resolve("m.safetensors"));
        int fds = Fd.openCount();
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            Map<String, String> d = DigestSidecar.compute(cp, cp.checkpoint().tensors(), 2);
            assertEquals(Map.of("abc", D2, "empty", D1), d);
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
                Thread.sleep(20);
                raf.seek(raf.length() - 1);
                raf.write('C');
            }
            CheckpointException e = assertThrows(CheckpointException.class,
                    () -> DigestSidecar.compute(cp, cp.checkpoint().tensors(), 2));
            assertTrue(e.getMessage().startsWith("checkpoint " + file + " changed while its digests were computed"
                    + " (mtime, ctime): "), e.getMessage());
        }
        assertEquals(fds, Fd.openCount());
    }
}
