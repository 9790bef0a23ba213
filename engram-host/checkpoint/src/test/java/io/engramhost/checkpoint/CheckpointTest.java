package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.engramhost.os.Posix;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CheckpointTest {
    @TempDir
    Path dir;
    private Path index;
    private Path shards;

    @BeforeEach
    void generate() throws IOException {
        shards = dir.resolve("sharded");
        index = CheckpointGenerator.writeSharded(shards, new CheckpointGenerator.Spec(List.of(14, 1), 4, 64, 7));
    }

    private static List<String> names(List<TensorInfo> tensors) {
        return tensors.stream().map(TensorInfo::name).toList();
    }

    private String fail(Path... paths) {
        return assertThrows(CheckpointException.class, () -> Checkpoint.open(paths)).getMessage();
    }

    private void writeIndex(String json) throws IOException {
        Files.writeString(index, json);
    }

    @Test
    void shouldOpenAShardedCheckpointThroughItsIndexOrItsDirectory() {
        Checkpoint viaIndex = Checkpoint.open(index);
        assertEquals(List.of("engram.layers.1.embedding.scale", "engram.layers.1.embedding.weight",
                "engram.layers.14.embedding.scale", "engram.layers.14.embedding.weight"), names(viaIndex.tensors()));
        assertEquals(List.of("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"),
                viaIndex.files().stream().map(SafetensorsFile::fileName).toList());
        Checkpoint viaDir = Checkpoint.open(shards);
        assertEquals(viaIndex.tensors(), viaDir.tensors());
        TensorInfo w14 = viaIndex.tensor("engram.layers.14.embedding.weight");
        assertEquals("model-00002-of-00002.safetensors", viaIndex.fileOf(w14).fileName());
        assertEquals(4 * 64, w14.length());
    }

    @Test
    void shouldOpenLooseFilesAndDirectoriesWithoutAnIndex() throws IOException {
        Files.delete(index);
        Checkpoint c = Checkpoint.open(shards);
        assertEquals(4, c.tensors().size());
        Path single = dir.resolve("one.safetensors");
        new SafetensorsWriter().add("other", DType.BF16, new long[] {2}, new byte[4]).write(single);
        Checkpoint both = Checkpoint.open(List.of(single, shards.resolve("model-00001-of-00002.safetensors")));
        assertEquals(List.of("engram.layers.1.embedding.scale", "engram.layers.1.embedding.weight", "other"),
                names(both.tensors()));
        assertEquals(single, both.files().get(0).path(), "files keep the order given");
    }

    @Test
    void shouldListTensorsInCodePointOrderAsTheFingerprintDoes() throws IOException {
        // UTF-16 code unit order (String.compareTo) puts the surrogate pair of U+1F600 before U+FFFD
        Path f = dir.resolve("order.safetensors");
        new SafetensorsWriter().add("a\uD83D\uDE00", DType.U8, new long[] {1}, new byte[1])
                .add("a\uFFFD", DType.U8, new long[] {1}, new byte[1]).add("a", DType.U8, new long[] {1}, new byte[1])
                .write(f);
        Checkpoint c = Checkpoint.open(f);
        List<String> expected = List.of("a", "a\uFFFD", "a\uD83D\uDE00");
        assertEquals(expected, names(c.tensors()));
        assertEquals(expected, names(c.select(List.of("a*"))));
        assertEquals(expected, Fingerprint.of(c, List.of(), "memfd", Fingerprint.LAYOUT_VERSION).tables().stream()
                .map(Fingerprint.Table::name).toList());
    }

    @Test
    void shouldSelectByGlobInNameOrder() {
        Checkpoint c = Checkpoint.open(index);
        assertEquals(c.tensors(), c.select(List.of()));
        assertEquals(c.tensors(), c.select(List.of("*")));
        assertEquals(List.of("engram.layers.1.embedding.weight", "engram.layers.14.embedding.weight"),
                names(c.select(List.of("*.weight"))));
        assertEquals(List.of("engram.layers.1.embedding.scale", "engram.layers.1.embedding.weight"),
                names(c.select(List.of("engram.layers.?.*", "engram.layers.1.embedding.weight"))));
        assertEquals(List.of("engram.layers.14.embedding.scale"), names(c.select(List.of("engram.layers.1?.*.scale"))));
        assertEquals(List.of(), names(Checkpoint.open(RawSafetensors.write(dir.resolve("e.safetensors"), "{}", 0))
                .select(List.of("*"))));
    }

    @Test
    void shouldNameAPatternThatMatchesNothing() {
        Checkpoint c = Checkpoint.open(index);
        assertEquals("tensor selection: pattern 'engram.layers.2.*' matches none of the 4 tensors of 2 files in "
                + shards.toAbsolutePath(), assertThrows(CheckpointException.class,
                        () -> c.select(List.of("*.weight", "engram.layers.2.*"))).getMessage());
        assertEquals("tensor selection: empty tensor name pattern",
                assertThrows(CheckpointException.class, () -> c.select(List.of(""))).getMessage());
        assertEquals("tensor selection: pattern 'engram.layers.1' matches none of the 4 tensors of 2 files in "
                + shards.toAbsolutePath(), assertThrows(CheckpointException.class,
                        () -> c.select(List.of("engram.layers.1"))).getMessage(), "no implicit prefix match");
    }

    @Test
    void shouldRefuseATensorInTwoFilesNamingBoth() throws IOException {
        Path a = new SafetensorsWriter().add("x", DType.U8, new long[] {1}, new byte[1]).write(dir.resolve("a.safetensors"));
        Path b = new SafetensorsWriter().add("x", DType.U8, new long[] {1}, new byte[1]).write(dir.resolve("b.safetensors"));
        assertEquals("tensor 'x' is in both " + a + " and " + b, fail(a, b));
        assertEquals(a + ": given more than once (via " + a + ")", fail(a, a));
    }

    @Test
    void shouldRefuseAnIndexThatDisagreesWithItsShards() throws IOException {
        String s1 = "model-00001-of-00002.safetensors";
        String s2 = "model-00002-of-00002.safetensors";
        String w1 = "engram.layers.1.embedding.weight";
        String c1 = "engram.layers.1.embedding.scale";
        String w14 = "engram.layers.14.embedding.weight";
        String c14 = "engram.layers.14.embedding.scale";
        writeIndex(map(w1, s1, c1, s1, w14, s2, c14, "missing.safetensors"));
        assertEquals(index + ": weight_map names shard 'missing.safetensors' (for tensor '" + c14 + "'), but "
                + shards.toAbsolutePath().resolve("missing.safetensors") + " does not exist", fail(index));
        writeIndex(map(w1, s1, c1, s1, w14, s2, c14, s2, "extra", s2));
        assertEquals(index + ": weight_map puts tensor 'extra' in '" + s2 + "', but that shard has no such tensor",
                fail(index));
        writeIndex(map(w1, s1, c1, s1, w14, s2));
        assertEquals(index + ": shard '" + s2 + "' holds tensor '" + c14 + "', which weight_map does not list",
                fail(index));
        writeIndex(map(w1, s1, c1, s1, w14, s2, c14, s1));
        assertEquals(index + ": weight_map puts tensor '" + c14 + "' in '" + s1 + "', but that shard has no such tensor",
                fail(index));
    }

    @Test
    void shouldRefuseMalformedIndexes() throws IOException {
        writeIndex(map("t", "../elsewhere.safetensors"));
        assertEquals(index + ": weight_map entry for tensor 't' is '../elsewhere.safetensors', not a file name in the"
                + " index's directory", fail(index));
        writeIndex("{\"weight_map\":{\"t\":3}}");
        assertEquals(index + ": weight_map entry for tensor 't' is not a file name but the number 3", fail(index));
        writeIndex("{\"metadata\":{}}");
        assertEquals(index + ": index has no weight_map object", fail(index));
        writeIndex("{\"weight_map\":{}");
        assertEquals(index + ": index JSON at byte 16: unexpected end of input, expected ',' or '}' in object",
                fail(index));
        writeIndex("[]");
        assertEquals(index + ": index is not a JSON object", fail(index));
    }

    @Test
    void shouldRefuseUnusablePaths() throws IOException {
        Path second = shards.resolve("other" + Checkpoint.INDEX_SUFFIX);
        Files.copy(index, second);
        assertEquals(shards + ": holds 2 index files [model.safetensors.index.json, other.safetensors.index.json]:"
                + " name the one to use", fail(shards));
        Path empty = Files.createDirectory(dir.resolve("empty"));
        assertEquals(empty + ": holds no *.safetensors file and no *.safetensors.index.json", fail(empty));
        Path text = Files.writeString(dir.resolve("notes.txt"), "hi");
        assertEquals(text + ": not a .safetensors file, a *.safetensors.index.json or a directory", fail(text));
        Path missing = dir.resolve("absent.safetensors");
        assertEquals(missing + ": no such file or directory", fail(missing));
        assertEquals("no checkpoint path given", fail());
    }

    @Test
    void shouldRefuseTensorsFromElsewhereInFileOf() throws IOException {
        Checkpoint c = Checkpoint.open(index);
        Path other = new SafetensorsWriter().add("x", DType.U8, new long[] {1}, new byte[1]).write(dir.resolve("o.safetensors"));
        TensorInfo foreign = SafetensorsFile.open(other).tensor("x");
        assertThrows(IllegalArgumentException.class, () -> c.fileOf(foreign));
        TensorInfo own = c.tensors().get(0);
        assertSame(c.files().get(0), c.fileOf(own));
    }

    @Test
    void shouldLeaveNoFileOpen() throws IOException {
        Path bad = RawSafetensors.write(dir.resolve("bad.safetensors"), "{\"t\":1}", 0);
        Runnable both = () -> {
            Checkpoint.open(index);
            assertThrows(CheckpointException.class, () -> Checkpoint.open(bad));
        };
        both.run(); // warm up: class loading may open jars for good
        int before = io.engramhost.os.ProcessProbe.countOpenFds();
        for (int i = 0; i < 20; i++) {
            both.run();
        }
        assertEquals(before, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    /** {"weight_map":{k1:v1,...}} */
    private static String map(String... kv) {
        StringBuilder sb = new StringBuilder("{\"metadata\":{\"total_size\":0},\"weight_map\":{");
        for (int i = 0; i < kv.length; i += 2) {
            sb.append(i > 0 ? "," : "").append('"').append(kv[i]).append("\":\"").append(kv[i + 1]).append('"');
        }
        return sb.append("}}").toString();
    }
}
