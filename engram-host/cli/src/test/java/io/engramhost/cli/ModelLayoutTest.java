package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.HfSnapshot;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.util.Bytes;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The published layout through the CLI, each command a process: {@code generate} (the Engram tables and their
 * config.json, {@code --model}, {@code --prefix}, what {@code --force} replaces and keeps, {@code --rows 0}),
 * {@code inspect} on a model directory (the selection and why, the content identity, {@code --write-digests}),
 * {@code verify} of a Hugging Face snapshot against a daemon process, with one blob damaged, and a file that is not
 * safetensors.
 */
@Timeout(180)
class ModelLayoutTest {
    private static final List<String> ENGRAM = List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight",
            "layers.14.engram.embed.scale", "layers.14.engram.embed.weight");

    private static List<String> names(Path dir) throws Exception {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> selection(Map<String, Object> inspected) {
        return (Map<String, Object>) inspected.get("selection");
    }

    @Test
    void shouldGenerateThePublishedLayoutThatInspectSelectsFromItsConfig(@TempDir Path dir) throws Exception {
        Path out = dir.resolve("gen");
        CliRun gen = CliRun.of("generate", "--out", out.toString(), "--rows", "73046");
        assertEquals(0, gen.exit(), gen.err());
        assertEquals(List.of("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                "model.safetensors.index.json"), names(out));
        assertTrue(gen.out().startsWith("wrote " + out.resolve("model.safetensors.index.json") + ": 2 Engram layers [1,"
                + " 14] of 73046 to 73048 rows x 256, 4 files, "), gen.out());
        assertEquals("", gen.err());
        Checkpoint cp = Checkpoint.open(out);
        assertEquals(ENGRAM, cp.tensors().stream().map(TensorInfo::name).toList(), "only the Engram tables");

        CliRun inspect = CliRun.of("inspect", out.toString());
        assertEquals(0, inspect.exit(), inspect.err());
        assertTrue(inspect.out().contains("\nselection: config.json engram_layer_ids [1, 14]: 4 tensors, "
                + Bytes.format(Checkpoint.totalBytes(cp.tensors())) + " (layers.1.engram.embed.scale, ...)\n"),
                inspect.out());
        assertTrue(inspect.out().contains("\nas served: rule config, backend memfd, content identity headers,"
                + " fingerprint "), inspect.out());
        assertEquals("", inspect.err(), "no warning: the config chose the tables");

        // --write-digests: a record of version 2 of the selected tables, which then gives them content identity
        CliRun digests = CliRun.of("inspect", "--write-digests", "--threads", "2", "--json", out.toString());
        assertEquals(0, digests.exit(), digests.err());
        Path record = out.resolve("engram-digests.json");
        DigestSidecar.Record r = DigestSidecar.readRecord(record);
        assertEquals(2, r.version());
        assertEquals(ENGRAM, List.copyOf(r.both().keySet()));
        Map<String, Object> inspected = ContentVerifyTest.json(digests.out());
        assertEquals("record", inspected.get("content_identity"));
        assertEquals("config", selection(inspected).get("rule"));
        assertEquals(4L, selection(inspected).get("tables"));
        assertNotEquals(inspected.get("fingerprint"), inspected.get("served_fingerprint"));
        CliRun again = CliRun.of("inspect", out.toString());
        assertTrue(again.out().contains(", content identity record, fingerprint " + inspected.get("served_fingerprint")
                + "\n"), again.out());

        // one shard of it: no model directory, so every tensor, with a warning
        CliRun shard = CliRun.of("inspect", out.resolve("model-00001-of-00002.safetensors").toString());
        assertEquals(0, shard.exit(), shard.err());
        assertTrue(shard.out().contains("\nselection: every tensor (no --tables, and no config.json naming"
                + " engram_layer_ids): 2 tensors, "), shard.out());
        assertTrue(shard.err().startsWith("engram-host inspect: selecting every tensor of the checkpoint (no --tables,"
                + " and no config.json naming engram_layer_ids): give --tables GLOB,... or the model's directory"),
                shard.err());
        assertEquals(1, shard.err().lines().count(), shard.err());
    }

    @Test
    void shouldGenerateTheWholeModelUnderAPrefixAndReplaceOnlyItsOwnFiles(@TempDir Path dir) throws Exception {
        Path out = dir.resolve("model");
        CliRun gen = CliRun.of("generate", "--out", out.toString(), "--rows", "1000", "--model", "--prefix", "model.");
        assertEquals(0, gen.exit(), gen.err());
        assertEquals(List.of("config.json", "model-00001-of-00006.safetensors", "model-00002-of-00006.safetensors",
                "model-00003-of-00006.safetensors", "model-00004-of-00006.safetensors",
                "model-00005-of-00006.safetensors", "model-00006-of-00006.safetensors", "model.safetensors.index.json"),
                names(out));
        Checkpoint cp = Checkpoint.open(out);
        assertEquals(16, cp.tensors().size());
        assertTrue(cp.tensor("model.layers.14.engram.wkv.weight") != null && cp.tensor("model.embed.weight") != null);
        Map<String, Object> inspected = ContentVerifyTest.json(CliRun.of("inspect", "--json", out.toString()).out());
        assertEquals("config", selection(inspected).get("rule"));
        assertEquals(4L, selection(inspected).get("tables"), "the Engram tables alone, under the prefix");
        assertTrue(((String) selection(inspected).get("description")).endsWith("(model.layers.1.engram.embed.scale,"
                + " ...)"), selection(inspected).toString());

        // a directory that holds anything is refused, and nothing in it is touched
        byte[] config = Files.readAllBytes(out.resolve("config.json"));
        CliRun refused = CliRun.of("generate", "--out", out.toString(), "--rows", "10");
        assertEquals(1, refused.exit(), refused.err());
        assertEquals("engram-host generate: " + out + ": already holds 8 entries (for example 'config.json'): give --out"
                + " a new or empty directory, or --force to replace the files generate writes (it removes nothing"
                + " else)\n", refused.err());
        assertEquals("", refused.out());
        assertEquals(List.of(config.length), List.of(Files.readAllBytes(out.resolve("config.json")).length));

        // --force: its own files replaced, the rest left as they were
        Path mine = Files.writeString(out.resolve("notes.txt"), "mine");
        CliRun forced = CliRun.of("generate", "--out", out.toString(), "--rows", "10", "--layers", "3", "--single-file",
                "--force");
        assertEquals(0, forced.exit(), forced.err());
        assertTrue(forced.out().startsWith("wrote " + out + ": 1 Engram layer [3] of 10 rows x 256, 2 files, "),
                forced.out());
        assertEquals("engram-host generate: " + out + " also holds 8 entries generate did not write (for example"
                + " 'model-00001-of-00006.safetensors'), left as they were\n", forced.err());
        assertEquals("mine", Files.readString(mine));
        assertEquals(List.of("config.json", "model-00001-of-00006.safetensors", "model-00002-of-00006.safetensors",
                "model-00003-of-00006.safetensors", "model-00004-of-00006.safetensors",
                "model-00005-of-00006.safetensors", "model-00006-of-00006.safetensors", "model.safetensors",
                "model.safetensors.index.json", "notes.txt"), names(out), "nothing removed, no temporary file left");
        assertTrue(Files.readString(out.resolve("config.json")).contains("\"engram_layer_ids\":[3]"));
        assertEquals(List.of("layers.3.engram.embed.scale", "layers.3.engram.embed.weight"),
                Checkpoint.open(out.resolve("model.safetensors")).tensors().stream().map(TensorInfo::name).toList());
    }

    @Test
    void shouldRefuseBadOptionsAsUsageErrors(@TempDir Path dir) throws Exception {
        CliRun zero = CliRun.of("generate", "--out", dir.resolve("z").toString(), "--rows", "0");
        assertEquals(2, zero.exit(), zero.err());
        assertEquals(List.of("engram-host generate: --rows: 0 must be at least 1",
                "Try 'engram-host generate --help'."), zero.err().lines().toList());
        assertFalse(Files.exists(dir.resolve("z")), "nothing written");
        CliRun prefix = CliRun.of("generate", "--out", dir.resolve("p").toString(), "--prefix", "model");
        assertEquals(2, prefix.exit(), prefix.err());
        assertEquals("engram-host generate: --prefix: 'model' must end in '.' (e.g. model.)",
                prefix.err().lines().findFirst().orElseThrow());
        Path file = Files.writeString(dir.resolve("f"), "x");
        CliRun notDir = CliRun.of("generate", "--out", file.toString());
        assertEquals(1, notDir.exit(), notDir.err());
        assertEquals("engram-host generate: " + file + ": not a directory: give --out a new or empty directory\n",
                notDir.err());
    }

    @Test
    void shouldSayAFileThatIsNotSafetensorsIsNot(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("x.safetensors"), "# Engram notes, not a checkpoint\n");
        CliRun inspect = CliRun.of("inspect", text.toString());
        assertEquals(1, inspect.exit(), inspect.err());
        assertEquals("engram-host inspect: " + text + ": not a safetensors file (its first 8 bytes, \"# Engram\" ="
                + " 2320456e6772616d, are not a header length followed by a JSON object): give a .safetensors file, an"
                + " index or a model directory\n", inspect.err());
        Path model = dir.resolve("m");
        assertEquals(0, CliRun.of("generate", "--out", model.toString(), "--rows", "100").exit());
        Files.writeString(model.resolve("config.json"), "{\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":[100,99]}");
        CliRun bad = CliRun.of("inspect", model.toString());
        assertEquals(1, bad.exit(), bad.err());
        assertEquals("engram-host inspect: " + model.resolve("config.json") + ": engram_num_embeddings[1] is 99 but"
                + " layers.14.engram.embed.weight has 100 rows\n", bad.err());
    }

    @Test
    void shouldVerifyEachSnapshotFileAgainstItsBlobsName(@TempDir Path dir) throws Exception {
        Path gen = dir.resolve("gen");
        assertEquals(0, CliRun.of("generate", "--out", gen.toString(), "--rows", "2000", "--model").exit());
        Path snapshot = CheckpointGenerator.writeHfSnapshot(gen, dir.resolve("hub/models--org--v4"), "0a1b2c");
        CliRun inspect = CliRun.of("inspect", snapshot.toString());
        assertTrue(inspect.out().contains(", content identity hf-snapshot, "), inspect.out());
        Path socket = dir.resolve("run/v.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", snapshot.toString())
                .awaitReady()) {
            CliRun ok = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", snapshot.toString(),
                    "--threads", "2");
            assertEquals(0, ok.exit(), ok.out() + ok.err());
            assertTrue(ok.out().startsWith("selection: config.json engram_layer_ids [1, 14]: 4 tensors, "), ok.out());
            assertTrue(ok.out().contains("verify: 4 tables equal, 0 differ"), ok.out());
            assertTrue(ok.out().contains("\nhf-snapshot: 2 files, "), ok.out());
            assertTrue(ok.out().strip().endsWith("verify ok"), ok.out());

            // a byte of the last shard's blob changed, outside the Engram tables: the tables still match, the blob not
            TensorInfo wkv = Checkpoint.open(snapshot).tensor("layers.14.engram.wkv.weight");
            HfSnapshot.Blob blob = HfSnapshot.of(wkv.file()).orElseThrow();
            try (RandomAccessFile raf = new RandomAccessFile(blob.blob().toFile(), "rw")) {
                raf.seek(wkv.offset());
                int b = raf.read();
                raf.seek(wkv.offset());
                raf.write(b ^ 0x40);
            }
            String actual = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(
                    Files.readAllBytes(blob.blob())));
            CliRun damaged = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", snapshot.toString());
            assertEquals(1, damaged.exit(), damaged.out() + damaged.err());
            assertEquals("engram-host verify: " + blob.blob() + ": its SHA-256 is " + actual + ", not the blob's name:"
                    + " the download is damaged; delete the blob and download it again", damaged.err().strip()
                    .lines().reduce((a, b) -> b).orElseThrow());
            assertTrue(damaged.out().contains("verify: 4 tables equal, 0 differ"), damaged.out());
            assertTrue(damaged.out().strip().endsWith("verify FAILED: a Hugging Face blob does not match its name"),
                    damaged.out());
            CliRun json = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", snapshot.toString(),
                    "--json");
            assertEquals(1, json.exit());
            Map<String, Object> doc = ContentVerifyTest.json(json.out());
            assertEquals(false, doc.get("ok"));
            @SuppressWarnings("unchecked")
            Map<String, Object> hf = (Map<String, Object>) doc.get("hf_snapshot");
            assertEquals(2L, hf.get("files"));
            assertTrue(((String) hf.get("damaged")).startsWith(blob.blob() + ": its SHA-256 is "), hf.toString());
        }
    }
}
