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
