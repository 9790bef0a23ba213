package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.json.JsonReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CheckpointGeneratorTest {
    @TempDir
    Path dir;

    static byte[] bytesOf(TensorInfo t) throws IOException {
        try (RandomAccessFile f = new RandomAccessFile(t.file().toFile(), "r")) {
            byte[] b = new byte[(int) t.length()];
            f.seek(t.offset());
            f.readFully(b);
            return b;
        }
    }

    @Test
    void shouldWriteTheV41LayoutSingleOrSharded() throws IOException {
        CheckpointGenerator.Spec spec = new CheckpointGenerator.Spec(List.of(14, 1), 1000, 256, 42);
        Checkpoint single = Checkpoint.open(CheckpointGenerator.writeSingle(dir.resolve("single"), spec));
        Path index = CheckpointGenerator.writeSharded(dir.resolve("sharded"), spec);
        Checkpoint sharded = Checkpoint.open(index);
        assertEquals(1, single.files().size());
        assertEquals(2, sharded.files().size());
        TensorInfo w = single.tensor("engram.layers.14.embedding.weight");
        assertEquals(DType.F8_E4M3, w.dtype());
        assertArrayEquals(new long[] {1000, 256}, w.shape());
        TensorInfo s = single.tensor("engram.layers.14.embedding.scale");
        assertEquals(DType.F8_E8M0, s.dtype());
        assertArrayEquals(new long[] {1000, 8}, s.shape());
        assertEquals(2 * spec.bytesPerLayer(), Checkpoint.totalBytes(single.tensors()));
        assertEquals(1000L * 264, spec.bytesPerLayer(), "264 bytes a row");
        for (TensorInfo t : single.tensors()) {
            assertArrayEquals(bytesOf(t), bytesOf(sharded.tensor(t.name())), t.name() + " same in both forms");
        }
        Map<?, ?> json = (Map<?, ?>) JsonReader.parse(Files.readAllBytes(index));
        assertEquals(Map.of("total_size", 2 * spec.bytesPerLayer()), json.get("metadata"));
        assertEquals("model-00002-of-00002.safetensors",
                ((Map<?, ?>) json.get("weight_map")).get("engram.layers.14.embedding.scale"));
    }

    @Test
    void shouldFillDeterministicallyFromTheSeed() throws IOException {
        TensorInfo a = Checkpoint.open(CheckpointGenerator.writeSingle(dir.resolve("a"),
                new CheckpointGenerator.Spec(List.of(1), 100, 64, 1))).tensor("engram.layers.1.embedding.weight");
        TensorInfo b = Checkpoint.open(CheckpointGenerator.writeSingle(dir.resolve("b"),
                new CheckpointGenerator.Spec(List.of(1), 100, 64, 1))).tensor("engram.layers.1.embedding.weight");
        TensorInfo c = Checkpoint.open(CheckpointGenerator.writeSingle(dir.resolve("c"),
                new CheckpointGenerator.Spec(List.of(1), 100, 64, 2))).tensor("engram.layers.1.embedding.weight");
        assertArrayEquals(bytesOf(a), bytesOf(b));
        assertFalse(Arrays.equals(bytesOf(a), bytesOf(c)), "another seed, other bytes");
        byte[] bytes = bytesOf(a);
        int zeros = 0;
        for (byte x : bytes) {
            zeros += x == 0 ? 1 : 0;
        }
        assertTrue(zeros < 100, "pseudo-random, not blank: " + zeros + " zero bytes of " + bytes.length);
    }

    @Test
    void shouldKeepAStreamPrefixWhateverTheLength() throws IOException {
        ByteArrayOutputStream shortOut = new ByteArrayOutputStream();
        CheckpointGenerator.random(5, "t", 13).writeTo(shortOut);
        ByteArrayOutputStream longOut = new ByteArrayOutputStream();
        CheckpointGenerator.random(5, "t", (1 << 20) + 21).writeTo(longOut);
        assertEquals(13, shortOut.size());
        assertEquals((1 << 20) + 21, longOut.size());
        assertArrayEquals(shortOut.toByteArray(), Arrays.copyOf(longOut.toByteArray(), 13));
    }

    @Test
    void shouldWriteEmptyTablesForZeroRows() throws IOException {
        Checkpoint c = Checkpoint.open(CheckpointGenerator.writeSingle(dir,
                new CheckpointGenerator.Spec(List.of(3), 0, 32, 1)));
        assertEquals(0, Checkpoint.totalBytes(c.tensors()));
        assertArrayEquals(new long[] {0, 1}, c.tensor("engram.layers.3.embedding.scale").shape());
    }

    @Test
    void shouldGiveLaterLayersSlightlyMoreRowsAsThePublishedModelDoes() {
        assertEquals(384006168L, CheckpointGenerator.layerRows(384006168L, 0));
        assertEquals(384016682L, CheckpointGenerator.layerRows(384006168L, 1));
        assertEquals(List.of(100000L, 100002L, 100004L), new CheckpointGenerator.Model(List.of(3, 1, 2), 100000, 256, 0,
                "", false, false).rowsPerLayer());
    }

    private static Map<String, String> weightMap(Path index) throws IOException {
        @SuppressWarnings("unchecked")
        Map<String, String> m = (Map<String, String>) ((Map<?, ?>) JsonReader.parse(Files.readAllBytes(index)))
                .get("weight_map");
        return m;
    }

    @Test
    void shouldWriteThePublishedEngramTablesAndAConfigThatNamesThem() throws IOException {
        CheckpointGenerator.Model spec = new CheckpointGenerator.Model(List.of(14, 1), 36523 * 3, 256, 42, "", false,
                false);
        CheckpointGenerator.Written w = CheckpointGenerator.writeModel(dir, spec);
        assertEquals(dir.resolve("model.safetensors.index.json"), w.served());
        assertEquals(List.of(dir.resolve("model-00001-of-00002.safetensors"), dir.resolve("model-00002-of-00002.safetensors"),
                dir.resolve("model.safetensors.index.json"), dir.resolve("config.json")), w.files());
        Checkpoint c = Checkpoint.open(dir);
        assertEquals(List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight", "layers.14.engram.embed.scale",
                "layers.14.engram.embed.weight"), c.tensors().stream().map(TensorInfo::name).toList());
        TensorInfo w14 = c.tensor("layers.14.engram.embed.weight");
        assertEquals(DType.F8_E4M3, w14.dtype());
        assertArrayEquals(new long[] {36523 * 3 + 3, 256}, w14.shape());
        TensorInfo s14 = c.tensor("layers.14.engram.embed.scale");
        assertEquals(DType.F8_E8M0, s14.dtype());
        assertArrayEquals(new long[] {36523 * 3 + 3, 8}, s14.shape());
        assertEquals(Checkpoint.totalBytes(c.tensors()), w.tensorBytes());
        Map<?, ?> config = (Map<?, ?>) JsonReader.parse(Files.readAllBytes(dir.resolve("config.json")));
        Map<?, ?> text = (Map<?, ?>) config.get("text_config");
        assertEquals(List.of(1L, 14L), text.get("engram_layer_ids"));
        assertEquals(List.of(109569L, 109572L), text.get("engram_num_embeddings"));
        assertEquals(256L, text.get("engram_head_dim"));
        assertEquals(8L, text.get("engram_n_heads"));
        assertEquals(4L, text.get("engram_max_ngram_size"));
        assertEquals(15L, text.get("num_hidden_layers"));
        Selection s = Selection.of(c, List.of());
        assertEquals(Selection.Rule.CONFIG, s.rule());
        assertEquals(c.tensors(), s.tensors(), "everything it writes is served");
        // one file: the directory is what to serve
        Path single = dir.resolve("single");
        CheckpointGenerator.Written one = CheckpointGenerator.writeModel(single, new CheckpointGenerator.Model(
                List.of(14, 1), 36523 * 3, 256, 42, "", false, true));
        assertEquals(single, one.served());
        Checkpoint sc = Checkpoint.open(single);
        assertEquals(1, sc.files().size());
        assertEquals(Selection.Rule.CONFIG, Selection.of(sc, List.of()).rule());
        for (TensorInfo t : c.tensors()) {
            assertArrayEquals(bytesOf(t), bytesOf(sc.tensor(t.name())), t.name() + " same in both forms");
        }
    }

    @Test
    void shouldWriteTheWholePublishedModelUnderAPrefix() throws IOException {
        CheckpointGenerator.Written w = CheckpointGenerator.writeModel(dir, new CheckpointGenerator.Model(List.of(1, 14),
                1000, 256, 7, "model.", true, false));
        Map<String, String> map = weightMap(w.served());
        assertEquals(16, map.size());
        assertEquals("model-00001-of-00006.safetensors", map.get("model.embed.weight"));
        assertEquals("model-00002-of-00006.safetensors", map.get("model.layers.0.attn.wq.weight"));
        assertEquals("model-00003-of-00006.safetensors", map.get("model.norm.weight"));
        assertEquals("model-00004-of-00006.safetensors", map.get("model.head.weight"));
        for (String t : List.of("embed.weight", "embed.scale", "wkv.weight", "wkv.scale", "q_weight", "k_weight")) {
            assertEquals("model-00005-of-00006.safetensors", map.get("model.layers.1.engram." + t), t);
            assertEquals("model-00006-of-00006.safetensors", map.get("model.layers.14.engram." + t), t);
        }
        Checkpoint c = Checkpoint.open(dir);
        assertEquals(DType.BF16, c.tensor("model.embed.weight").dtype());
        assertArrayEquals(new long[] {1024, 512}, c.tensor("model.head.weight").shape());
        assertArrayEquals(new long[] {512, 256}, c.tensor("model.layers.14.engram.wkv.weight").shape());
        assertArrayEquals(new long[] {512, 8}, c.tensor("model.layers.14.engram.wkv.scale").shape());
        assertArrayEquals(new long[] {256}, c.tensor("model.layers.14.engram.q_weight").shape());
        assertArrayEquals(new long[] {1000, 256}, c.tensor("model.layers.14.engram.embed.weight").shape(),
                "1000 / 36523 rows more: none");
        Selection s = Selection.of(c, List.of());
        assertEquals(List.of("model.layers.1.engram.embed.scale", "model.layers.1.engram.embed.weight",
                "model.layers.14.engram.embed.scale", "model.layers.14.engram.embed.weight"),
                s.tensors().stream().map(TensorInfo::name).toList(), "the config selects the Engram tables alone");
        // the prefix changes the names, not the bytes
        Path bare = dir.resolve("bare");
        CheckpointGenerator.writeModel(bare, new CheckpointGenerator.Model(List.of(1, 14), 1000, 256, 7, "", true, false));
        assertArrayEquals(bytesOf(c.tensor("model.layers.1.engram.embed.weight")),
                bytesOf(Checkpoint.open(bare).tensor("layers.1.engram.embed.weight")));
        // one layer: the Engram tables in one last shard
        Path lone = dir.resolve("lone");
        assertEquals(5, Checkpoint.open(CheckpointGenerator.writeModel(lone, new CheckpointGenerator.Model(List.of(3), 10,
                32, 1, "", true, false)).served()).files().size());
    }

    @Test
    void shouldReplaceOnlyTheFilesItWritesAndRefuseBadModels() throws IOException {
        Path mine = Files.writeString(dir.resolve("notes.txt"), "mine");
        Path old = Files.writeString(dir.resolve("config.json"), "{}");
        CheckpointGenerator.writeModel(dir, new CheckpointGenerator.Model(List.of(1), 10, 32, 1, "", false, true));
        assertEquals("mine", Files.readString(mine));
        assertTrue(Files.readString(old).contains("engram_layer_ids"), "its own config.json replaced");
        try (var left = Files.list(dir)) {
            assertEquals(List.of("config.json", "model.safetensors", "notes.txt"), left.map(p -> p.getFileName().toString())
                    .sorted().toList(), "no temporary file left");
        }
        assertEquals("4611686018427387904 rows of 256 values are more than 2^63 bytes", assertThrows(
                IllegalArgumentException.class, () -> new CheckpointGenerator.Model(List.of(1), 1L << 62, 256, 0, "", false,
                        false)).getMessage());
        assertEquals("rows must be at least 1, was 0", assertThrows(IllegalArgumentException.class,
                () -> new CheckpointGenerator.Model(List.of(1), 0, 256, 0, "", false, false)).getMessage());
        assertEquals("prefix 'model' must be empty or end in '.'", assertThrows(IllegalArgumentException.class,
                () -> new CheckpointGenerator.Model(List.of(1), 1, 256, 0, "model", false, false)).getMessage());
        assertEquals("no layer ids given", assertThrows(IllegalArgumentException.class,
                () -> new CheckpointGenerator.Model(List.of(), 1, 256, 0, "", false, false)).getMessage());
    }

    @Test
    void shouldRefuseBadSpecs() {
        assertEquals("dim must be a positive multiple of 32 (one E8M0 scale per 32 values), was 100",
                assertThrows(IllegalArgumentException.class,
                        () -> new CheckpointGenerator.Spec(List.of(1), 10, 100, 0)).getMessage());
        assertEquals("no layer ids given", assertThrows(IllegalArgumentException.class,
                () -> new CheckpointGenerator.Spec(List.of(), 10, 256, 0)).getMessage());
        assertEquals("layer id -1 is negative", assertThrows(IllegalArgumentException.class,
                () -> new CheckpointGenerator.Spec(List.of(-1, 2), 10, 256, 0)).getMessage());
        assertEquals("rows must be >= 0, was -5", assertThrows(IllegalArgumentException.class,
                () -> new CheckpointGenerator.Spec(List.of(1), -5, 256, 0)).getMessage());
    }
}
