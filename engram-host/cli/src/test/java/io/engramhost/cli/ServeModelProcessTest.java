package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.Expectations;
import io.engramhost.client.FingerprintMismatchException;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.protocol.Expectation;
import java.io.RandomAccessFile;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue #25's must-shows against real daemon processes: {@code serve MODEL_DIR} selects exactly the config's four
 * Engram tables, which the Java CLI and library import byte-exact with an expectation of the directory (and under a
 * {@code model.} prefix); config fields that disagree with the tensors are refused in one line; with a digest record
 * on each of two copies that differ in one byte of one table, the original's expectation fails at connect naming the
 * table while the copy's own passes; a record that disagrees with the files stops the load, naming the tensor and
 * the record; without a record the connection passes with the one "headers only" line; and a mismatch is shown as a
 * summary and at most five differences.
 */
@Timeout(240)
class ServeModelProcessTest {
    private static final List<String> ENGRAM = List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight",
            "layers.14.engram.embed.scale", "layers.14.engram.embed.weight");
    private static final ClientOptions QUIET = ClientOptions.defaults().withName("serve-model-test");

    private static Path model(Path dir, String name, String... extra) throws Exception {
        Path out = dir.resolve(name);
        List<String> args = new ArrayList<>(List.of("generate", "--out", out.toString(), "--rows", "4096", "--model"));
        args.addAll(List.of(extra));
        CliRun gen = CliRun.of(args.toArray(String[]::new));
        assertEquals(0, gen.exit(), gen.err());
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> status(Path socket) throws Exception {
        CliRun s = CliRun.of("status", "--socket", socket.toString(), "--json");
        assertEquals(0, s.exit(), s.err());
        return ContentVerifyTest.json(s.out());
    }

    @SuppressWarnings("unchecked")
    private static List<String> servedNames(Map<String, Object> status) {
        return ((List<Map<String, Object>>) status.get("tables")).stream().map(t -> (String) t.get("name")).sorted()
                .toList();
    }

    private static byte[] fileBytes(TensorInfo t) throws Exception {
        byte[] b = new byte[Math.toIntExact(t.length())];
        try (RandomAccessFile raf = new RandomAccessFile(t.file().toFile(), "r")) {
            raf.seek(t.offset());
            raf.readFully(b);
        }
        return b;
    }

    /** Flips one bit of the byte at {@code at} of tensor {@code name}'s data, in place: the headers stay the same. */
    private static void flipByte(Path checkpoint, String name, long at) throws Exception {
        TensorInfo t = Checkpoint.open(checkpoint).tensor(name);
        try (FileChannel ch = FileChannel.open(t.file(), StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            java.nio.ByteBuffer one = java.nio.ByteBuffer.allocate(1);
            ch.read(one, t.offset() + at);
            one.flip();
            byte b = one.get();
            ch.write(java.nio.ByteBuffer.wrap(new byte[] {(byte) (b ^ 0x01)}), t.offset() + at);
        }
    }

    private static void copyTree(Path from, Path to) throws Exception {
        Files.createDirectories(to);
        try (Stream<Path> s = Files.list(from)) {
            for (Path p : s.toList()) {
                Files.copy(p, to.resolve(p.getFileName()));
            }
        }
    }

    /** The byte-exact import: every served table's SHA-256 equals that of its bytes in the safetensors file. */
    private static void assertByteExact(ImportedTables imported, Path checkpoint) throws Exception {
        Checkpoint cp = Checkpoint.open(checkpoint);
        for (TableView t : imported.tables().values()) {
            byte[] want = MessageDigest.getInstance("SHA-256").digest(fileBytes(cp.tensor(t.name())));
            assertArrayEquals(want, t.sha256(), t.name());
        }
    }

    @Test
    void shouldServeTheConfigsEngramTablesThatBothJavaClientsImportByteExactFromTheDirectory(@TempDir Path dir)
            throws Exception {
        Path m = model(dir, "m");
        Path socket = dir.resolve("run/m.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("m.log"), "--checkpoint", m.toString(),
                "--threads", "2").awaitReady()) {
            Map<String, Object> st = status(socket);
            assertEquals(ENGRAM, servedNames(st), "exactly the config's four tables of a whole model's shape");
            @SuppressWarnings("unchecked")
            Map<String, Object> sel = (Map<String, Object>) st.get("selection");
            assertEquals("config", sel.get("rule"));
            assertEquals(4L, sel.get("tables"));
            assertTrue(((String) sel.get("description")).startsWith("config.json engram_layer_ids [1, 14]: 4 tensors, "),
                    sel.toString());
            assertEquals("headers", st.get("content_identity"));
            String log = d.log();
            assertTrue(log.contains("selection: config.json engram_layer_ids [1, 14]: 4 tensors, "), log);
            assertTrue(log.contains("content identity: headers (no digest record"), log);

            // the CLI, with nothing but the directory: exit 0 and the one "headers only" line on stderr
            CliRun imp = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint", m.toString(),
                    "--json");
            assertEquals(0, imp.exit(), imp.err());
            assertEquals(1, imp.err().lines().filter(l -> l.contains("compared headers only")).count(), imp.err());
            for (String name : ENGRAM) {
                assertTrue(imp.out().contains("\"name\":\"" + name + "\""), imp.out());
            }

            // the library: Expectations.ofCheckpoint(dir), the tables byte-exact, the notice said once
            List<String> notices = new ArrayList<>();
            Expectation e = Expectations.ofCheckpoint(List.of(m), List.of(), notices::add);
            assertEquals(List.of(), notices, "the config chose the tables: no warning");
            try (ImportedTables t = EngramClient.connect(socket, e, QUIET.withNotices(notices::add))) {
                assertEquals(ENGRAM, t.tables().keySet().stream().sorted().toList());
                assertByteExact(t, m);
            }
            assertEquals(List.of(EngramClient.HEADERS_ONLY), notices);

            // every tensor expected (--tables '*'): one selection line, not a line per tensor; at most 5 shown
            CliRun all = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint", m.toString(),
                    "--tables", "*");
            assertEquals(1, all.exit(), all.err());
            List<String> lines = all.err().lines().toList();
            assertTrue(lines.get(0).matches("engram-host import: FINGERPRINT_MISMATCH: the daemon on "
                    + java.util.regex.Pattern.quote(socket.toString()) + " serves fingerprint [0-9a-f]{64}, not the"
                    + " expected checkpoint: [0-9]+ differences?"), lines.get(0));
            assertTrue(lines.get(1).startsWith("  selection: the daemon serves 4 tables by ["), all.err());
            assertTrue(lines.get(1).contains("; this expectation selects "), all.err());
            assertTrue(lines.size() <= 1 + 5 + 1, all.err());
            assertTrue(lines.stream().allMatch(l -> l.length() < 300), "short lines: " + all.err());
        }
    }

    @Test
    void shouldServeAPrefixedModelAndRefuseAConfigThatDisagreesWithTheTensors(@TempDir Path dir) throws Exception {
        Path m = model(dir, "p", "--prefix", "model.");
        Path socket = dir.resolve("run/p.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("p.log"), "--checkpoint", m.toString(),
                "--threads", "2").awaitReady()) {
            assertEquals(ENGRAM.stream().map(n -> "model." + n).toList(), servedNames(status(socket)));
            try (ImportedTables t = EngramClient.connect(socket, Expectations.ofCheckpoint(List.of(m), List.of(),
                    n -> { }), QUIET.withNotices(n -> { }))) {
                assertEquals(4, t.tables().size());
                assertByteExact(t, m);
            }
        }
        // engram_num_embeddings that disagrees with layer 14's rows: serve refuses in one line naming the field
        Path config = m.resolve("config.json");
        String text = Files.readString(config);
        int rows14 = (int) Checkpoint.open(m).tensor("model.layers.14.engram.embed.weight").shape()[0];
        Files.writeString(config, text.replace(Integer.toString(rows14), Integer.toString(rows14 + 1)));
        CliRun serve = CliRun.of("serve", "--socket", dir.resolve("run/q.sock").toString(), "--checkpoint",
                m.toString());
        assertEquals(1, serve.exit(), serve.err());
        List<String> err = serve.err().lines().filter(l -> l.startsWith("engram-host serve: ")).toList();
        assertEquals(1, err.size(), serve.err());
        assertTrue(err.get(0).contains("engram_num_embeddings"), err.get(0));
        assertTrue(err.get(0).contains(Integer.toString(rows14 + 1)), err.get(0));
        assertFalse(Files.exists(dir.resolve("run/q.sock")), "refused before it took the socket");
    }

    @Test
    void shouldTellCopiesOfTheSameHeadersApartByTheirRecordsAndRefuseARecordTheFilesDisagreeWith(@TempDir Path dir)
            throws Exception {
        Path original = model(dir, "a");
        Path copy = dir.resolve("b");
        copyTree(original, copy);
        flipByte(copy, "layers.14.engram.embed.weight", 12345);
        for (Path p : List.of(original, copy)) {
            CliRun w = CliRun.of("inspect", "--write-digests", "--threads", "2", p.toString());
            assertEquals(0, w.exit(), w.err());
            assertEquals(2, DigestSidecar.readRecord(p.resolve("engram-digests.json")).version());
        }
        Path socket = dir.resolve("run/b.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("b.log"), "--checkpoint", copy.toString(),
                "--threads", "2").awaitReady()) {
            assertEquals("record", status(socket).get("content_identity"));
            assertTrue(d.log().contains("content identity: record (4 tables checked against "), d.log());

            // the original's expectation: refused at connect, naming the table and the kind of digest
            CliRun other = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint",
                    original.toString());
            assertEquals(1, other.exit(), other.err());
            assertTrue(other.err().contains("\n  table 'layers.14.engram.embed.weight': content differs:"
                    + " engram-digest-v1 expected "), other.err());
            FingerprintMismatchException e = assertThrows(FingerprintMismatchException.class,
                    () -> EngramClient.connect(socket, Expectations.ofCheckpoint(List.of(original), List.of(),
                            n -> { }), QUIET).close());
            assertTrue(e.shown().stream().anyMatch(l -> l.startsWith("table 'layers.14.engram.embed.weight': content"
                    + " differs: sha256-tree-v1 expected ")), e.shown().toString());
            assertTrue(e.shown().size() <= FingerprintMismatchException.SHOWN_DIFFERENCES + 1);
            assertTrue(e.summary().endsWith("not the expected checkpoint: " + e.details().size() + " differences"),
                    e.summary());

            // the copy's own expectation passes, and without the "headers only" line: content was compared
            CliRun own = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint", copy.toString());
            assertEquals(0, own.exit(), own.err());
            assertFalse(own.err().contains("compared headers only"), own.err());
            List<String> notices = new ArrayList<>();
            try (ImportedTables t = EngramClient.connect(socket, Expectations.ofCheckpoint(List.of(copy), List.of(),
                    notices::add), QUIET.withNotices(notices::add))) {
                assertByteExact(t, copy);
            }
            assertEquals(List.of(), notices);
        }

        // the original's record, then a byte of its layer 1 weight changed: the load refuses, naming both
        flipByte(original, "layers.1.engram.embed.weight", 7);
        Path s2 = dir.resolve("run/a.sock");
        CliRun refused = CliRun.of("serve", "--socket", s2.toString(), "--checkpoint", original.toString(), "--threads",
                "2");
        assertEquals(1, refused.exit(), refused.err());
        List<String> err = refused.err().lines().filter(l -> l.startsWith("engram-host serve: ")).toList();
        assertEquals(1, err.size(), refused.err());
        assertTrue(err.get(0).contains("tensor 'layers.1.engram.embed.weight': its bytes have engram digest v1 "),
                err.get(0));
        assertTrue(err.get(0).contains(", but the digest record " + original.resolve("engram-digests.json")
                + " says "), err.get(0));
        assertTrue(err.get(0).endsWith("engram-host inspect --write-digests " + original), err.get(0));
        assertFalse(Files.exists(s2), "no socket left behind");
    }

    @Test
    void shouldGiveAHuggingFaceSnapshotContentIdentityWithoutARecord(@TempDir Path dir) throws Exception {
        Path m = model(dir, "m");
        Path snapshot = CheckpointGenerator.writeHfSnapshot(m, dir.resolve("hub/models--org--v4"), "0a1b2c");
        Path socket = dir.resolve("run/h.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("h.log"), "--checkpoint", snapshot.toString(),
                "--threads", "2").awaitReady()) {
            assertEquals("hf-snapshot", status(socket).get("content_identity"));
            List<String> notices = new ArrayList<>();
            try (ImportedTables t = EngramClient.connect(socket, Expectations.ofCheckpoint(List.of(snapshot),
                    List.of(), notices::add), QUIET.withNotices(notices::add))) {
                assertEquals(ENGRAM, t.tables().keySet().stream().sorted().toList());
            }
            assertEquals(List.of(), notices, "the files' SHA-256 compared: no headers-only line");
            // the plain directory (same headers, no snapshot) against the snapshot's daemon: passes, headers only
            CliRun imp = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint", m.toString());
            assertEquals(0, imp.exit(), imp.err());
            assertTrue(imp.err().contains("compared headers only"), imp.err());
        }
    }
}
