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
        assertEquals("'version' is the number 2, this build reads only 1",
                readError(doc("\"engram-content-digests\"", "2", "\"sha256-tree-v1\"", "16777216", ok)));
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
