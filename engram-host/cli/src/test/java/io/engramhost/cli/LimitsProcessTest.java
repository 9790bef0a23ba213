package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.protocol.Expectation;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The limits (docs/checkpoints.md, "Limits") at their boundaries, through the CLI in separate processes:
 * exactly at a limit, inspect says valid, serve becomes ready and a client imports the table; one over,
 * inspect says invalid (exit 1) and serve exits 1 with the same line before it creates its socket.
 */
@Timeout(300)
class LimitsProcessTest {
    /** {@code bytes} bytes of UTF-8, mostly two-byte characters: the limit counts bytes, not characters. */
    static String nameOfBytes(String prefix, int bytes) {
        int rest = bytes - prefix.length();
        String s = prefix + "é".repeat(rest / 2) + (rest % 2 == 1 ? "x" : "");
        assertEquals(bytes, s.getBytes(StandardCharsets.UTF_8).length);
        return s;
    }

    static long[] ones(int rank) {
        long[] shape = new long[rank];
        Arrays.fill(shape, 1);
        return shape;
    }

    static Path file(Path dir, String name, String tensor, long[] shape) throws Exception {
        return new SafetensorsWriter().add("plain", DType.F32, new long[] {4}, new byte[16])
                .add(tensor, DType.U8, shape, new byte[(int) DType.U8.byteLength(shape)]).write(dir.resolve(name));
    }

    /** inspect (its text output) and serve both refuse {@code file} with one line containing {@code problem}. */
    static void assertRefused(Path dir, Path file, String problem) throws Exception {
        CliRun inspect = CliRun.of("inspect", file.toString());
        assertEquals(1, inspect.exit(), inspect.out() + inspect.err());
        assertTrue(inspect.err().startsWith("engram-host inspect: ") && inspect.err().contains(problem)
                && inspect.err().contains("(docs/checkpoints.md, Limits)"), inspect.err());
        assertRefusedByServe(dir, file, problem);
    }

    /** inspect --json says valid:false naming {@code problem}, and serve refuses {@code file}. */
    static void assertRefusedByJsonInspectAndServe(Path dir, Path file, String problem) throws Exception {
        CliRun json = CliRun.of("inspect", "--json", file.toString());
        assertEquals(1, json.exit());
        assertTrue(json.out().startsWith("{\"valid\":false,\"error\":") && json.out().contains(problem), json.out());
        assertRefusedByServe(dir, file, problem);
    }

    static void assertRefusedByServe(Path dir, Path file, String problem) throws Exception {
        Path socket = dir.resolve("refused/s.sock");
        CliRun serve = CliRun.of("serve", "--checkpoint", file.toString(), "--numa", "none", "--socket", socket.toString());
        assertEquals(1, serve.exit(), serve.err());
        assertEquals(1, serve.err().lines().count(), serve.err());
        assertTrue(serve.err().startsWith("engram-host serve: ") && serve.err().contains(problem), serve.err());
        assertFalse(Files.exists(socket.getParent()), "refused before the socket (or its directory) was created");
    }

    @Test
    void shouldInspectServeAndImportANameOf4096BytesAndARankOf16(@TempDir Path dir) throws Exception {
        String name = nameOfBytes("n.", 4096);
        Path file = new SafetensorsWriter().add(name, DType.BF16, new long[] {2, 3}, new byte[12])
                .add("rank16", DType.U8, ones(16), new byte[] {7}).add("rank0", DType.F32, new long[0], new byte[4])
                .write(dir.resolve("at-limit.safetensors"));
        CliRun inspect = CliRun.of("inspect", file.toString());
        assertEquals(0, inspect.exit(), inspect.err());
        assertTrue(inspect.out().contains("valid: 3 tensors"), inspect.out());
        Path socket = dir.resolve("run/l.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", file.toString())
                .awaitReady()) {
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--digest", "sha256", "--json",
                    "--expect-checkpoint", file.toString(), "--verify-content", file.toString());
            assertEquals(0, r.exit(), r.err());
            Map<String, Map<String, Object>> tables = CliIntegrationTest.importedTables(r.out());
            assertEquals(List.of(1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L),
                    tables.get("rank16").get("shape"));
            assertEquals("verified", tables.get(name).get("content"), "the 4096-byte name round trips");
            assertEquals("verified", tables.get("rank16").get("content"));
        }
    }

    /**
     * A checkpoint whose fingerprint is over 1 MiB: the client's expected checkpoint (any backend, its own
     * patterns) matches, and another one of the same size does not, through the Java and the Python CLI.
     */
    @Test
    void shouldMatchAnExpectedCheckpointWhoseFingerprintIsOverOneMiB(@TempDir Path dir) throws Exception {
        SafetensorsWriter w = new SafetensorsWriter();
        SafetensorsWriter other = new SafetensorsWriter();
        for (int i = 0; i < 12_000; i++) {
            String name = String.format("t.%05d.", i) + "n".repeat(100);
            w.add(name, DType.U8, new long[] {1}, new byte[] {(byte) i});
            other.add(name, DType.U8, new long[] {i == 11_999 ? 2 : 1}, new byte[i == 11_999 ? 2 : 1]);
        }
        Path file = w.write(dir.resolve("many.safetensors"));
        Path otherFile = other.write(dir.resolve("other.safetensors"));
        Fingerprint fp = Fingerprint.of(Checkpoint.open(file), List.of(), "", Fingerprint.LAYOUT_VERSION);
        assertTrue(fp.canonicalBytes().length > 1 << 20, "over 1 MiB: " + fp.canonicalBytes().length);
        Path socket = dir.resolve("run/m.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", file.toString())
                .awaitReady()) {
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--json", "--expect-checkpoint",
                    file.toString());
            assertEquals(0, r.exit(), r.err());
            assertEquals(12_000, CliIntegrationTest.importedTables(r.out()).size());
            CliRun mismatch = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint",
                    otherFile.toString());
            assertTrue(mismatch.exit() != 0 && mismatch.err().contains("files or tables differ"), mismatch.err());
        }
    }

    @Test
    void shouldRefuseANameOf4097Bytes(@TempDir Path dir) throws Exception {
        Path file = file(dir, "name.safetensors", nameOfBytes("n.", 4097), new long[] {1});
        assertRefused(dir, file, "the name is 4097 bytes of UTF-8, over the limit of 4096");
    }

    @Test
    void shouldRefuseRank17(@TempDir Path dir) throws Exception {
        Path file = file(dir, "rank.safetensors", "rank17", ones(17));
        assertRefusedByJsonInspectAndServe(dir, file, "tensor 'rank17': rank 17 (U8 " + Arrays.toString(ones(17))
                + ") is over the limit of 16");
    }

    /**
     * A checkpoint whose fingerprint, as served with backend memfd, is exactly {@code bytes} long: tables
     * of 4000-byte names, the last one's length making up the rest. The fingerprint's length depends only
     * on the names, so it is computed (from the same records Fingerprint.of makes) before the file is written.
     */
    static Path fingerprintOf(Path dir, long bytes) throws Exception {
        Path file = dir.resolve("fp-" + bytes + ".safetensors");
        int n = (int) ((bytes - 200) / 4030);
        List<String> names = new java.util.ArrayList<>();
        for (int i = 0; i < n; i++) {
            String prefix = String.format("t%07d.", i);
            names.add(prefix + "p".repeat(4000 - prefix.length()));
        }
        names.add("z");
        java.util.function.Function<List<String>, Integer> size = list -> new Fingerprint(Fingerprint.LAYOUT_VERSION,
                "memfd", List.of(), List.of(new Fingerprint.FileEntry(file.getFileName().toString(), 0, "0".repeat(64))),
                list.stream().map(t -> new Fingerprint.Table(t, DType.U8, new long[] {1}, 1)).toList())
                .canonicalBytes().length;
        names.set(n, "z" + "q".repeat((int) (bytes - size.apply(names))));
        SafetensorsWriter w = new SafetensorsWriter();
        for (int i = 0; i <= n; i++) {
            w.add(names.get(i), DType.U8, new long[] {1}, new byte[] {(byte) i});
        }
        w.write(file);
        assertEquals(bytes, Fingerprint.of(Checkpoint.open(file), List.of(), "memfd", Fingerprint.LAYOUT_VERSION)
                .canonicalBytes().length);
        return file;
    }

    @Test
    void shouldServeAFingerprintOfExactly16MiBAndRefuseOneByteMore(@TempDir Path dir) throws Exception {
        Path at = fingerprintOf(dir, 16 << 20);
        CliRun inspect = CliRun.of("inspect", "--json", at.toString());
        assertEquals(0, inspect.exit(), inspect.err());
        Path socket = dir.resolve("run/f.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", at.toString())
                .awaitReady()) {
            // a client in this JVM (a CLI import would print every 4 KiB name twice over): a manifest of 33 MB
            try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(Checkpoint.open(at).tensors().size(), t.tables().size());
                assertEquals(1, t.table(Checkpoint.open(at).tensors().get(1).name()).getByte(0));
            }
        }
        Path over = fingerprintOf(dir, (16 << 20) + 1);
        assertRefusedByJsonInspectAndServe(dir, over, "is 16777217 bytes, over the limit of 16777216 (16 MiB)");
    }

    /**
     * A header of exactly the 100 MiB limit (a short JSON object padded with spaces, as writers pad headers): serve
     * validates it, loads, checks that the checkpoint is unchanged and serves. That check once read the header
     * again whole and copied it, 200 MiB on the daemon's 160 MiB heap, and the daemon died of OutOfMemoryError
     * (exit 70) after it had taken its socket; it now hashes the header in pieces.
     */
    @Test
    void shouldServeAHeaderOfExactlyTheMaximumLength(@TempDir Path dir) throws Exception {
        byte[] json = "{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}"
                .getBytes(StandardCharsets.UTF_8);
        long n = 100L << 20;
        Path file = dir.resolve("max-header.safetensors");
        try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(file,
                java.nio.file.StandardOpenOption.CREATE_NEW, java.nio.file.StandardOpenOption.WRITE)) {
            ch.write(java.nio.ByteBuffer.allocate(8 + json.length).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(n)
                    .put(json).flip());
            byte[] spaces = new byte[1 << 20];
            Arrays.fill(spaces, (byte) ' ');
            for (long left = n - json.length; left > 0; left -= Math.min(left, spaces.length)) {
                ch.write(java.nio.ByteBuffer.wrap(spaces, 0, (int) Math.min(left, spaces.length)));
            }
            ch.write(java.nio.ByteBuffer.wrap(new byte[] {5, 6}));
        }
        assertEquals(8 + n + 2, Files.size(file));
        Path socket = dir.resolve("run/m.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", file.toString())
                .awaitReady()) {
            try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(5, t.table("t").getByte(0));
                assertEquals(6, t.table("t").getByte(1));
            }
            CliRun status = CliRun.of("status", "--socket", socket.toString());
            assertEquals(0, status.exit(), status.err() + d.log());
            assertFalse(d.log().contains("OutOfMemoryError"), d.log());
        }
    }

    /**
     * STATUS lists every table: 17 MB for 100,000 tables, a checkpoint the daemon's heap holds. Sixteen peers ask at
     * once and take their answers only after two seconds. Each answer used to be built and held whole (and its maps
     * and strings, several times its size): four were enough for OutOfMemoryError and exit 70. The table list is now
     * encoded once and shared by every answer; the documents are the same, every field in its place.
     */
    @Test
    void shouldAnswerSixteenStatusRequestsAtOnceForAHundredThousandTables(@TempDir Path dir) throws Exception {
        SafetensorsWriter w = new SafetensorsWriter();
        for (int i = 0; i < 100_000; i++) {
            w.add(String.format("model.layers.%d.mlp.experts.%d.down_proj.weight", i / 256, i % 256), DType.U8,
                    new long[] {1}, new byte[] {(byte) i});
        }
        Path file = w.write(dir.resolve("many.safetensors"));
        Path socket = dir.resolve("run/s.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", file.toString())
                .awaitReady()) {
            List<RawClient.Joined> answers = owedAtOnce(d, socket, 16, RawClient.empty(5, 2));
            while (!answers.isEmpty()) {
                RawClient.Joined j = answers.remove(0);
                assertEquals(6, j.type(), "STATUS_REPLY");
                @SuppressWarnings("unchecked")
                Map<String, Object> doc = (Map<String, Object>) io.engramhost.json.JsonReader.parse(
                        io.engramhost.protocol.Frames.decodeStatusReply(j.reader()));
                assertEquals(List.of("state", "pid", "uid", "version", "protocol", "backend", "instance", "socket",
                        "uptime_s", "progress", "fingerprint", "bytes", "regions", "tables"),
                        List.copyOf(doc.keySet()).subList(0, 14));
                List<?> tables = (List<?>) doc.get("tables");
                assertEquals(100_000, tables.size());
                assertEquals("model.layers.99.mlp.experts.99.down_proj.weight", // the last in name order
                        ((Map<?, ?>) tables.get(99_999)).get("name"));
                assertTrue(doc.containsKey("connections") && doc.containsKey("leases"), doc.keySet().toString());
            }
            assertLived(d, socket);
        }
    }

    /**
     * Every FINGERPRINT_MISMATCH carries the daemon's fingerprint, here the largest there is (16 MiB). Twenty-four
     * peers expect another one at once and take their answers only after two seconds. Each answer used to hold its
     * own copies of the fingerprint until taken, and the daemon died of OutOfMemoryError (exit 70); the answers now
     * share the catalog's array.
     */
    @Test
    void shouldAnswerTwentyFourMismatchesAtOnceWithTheLargestFingerprint(@TempDir Path dir) throws Exception {
        Path at = fingerprintOf(dir, 16 << 20);
        Path socket = dir.resolve("run/x.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", at.toString())
                .awaitReady()) {
            List<RawClient.Joined> answers = owedAtOnce(d, socket, 24,
                    new RawClient.Frame(3, 2).i32(0).i32(-1).u8(1).raw(new byte[32]).bytes());
            for (RawClient.Joined j : answers) {
                assertEquals(9, j.type(), "ERROR");
                io.engramhost.protocol.ErrorReply e = io.engramhost.protocol.ErrorReply.decode(j.reader());
                assertEquals(io.engramhost.protocol.ErrorCode.FINGERPRINT_MISMATCH, e.code(), e.message());
                assertEquals(16 << 20, e.daemonFingerprint().length);
            }
            assertLived(d, socket);
        }
    }

    /**
     * {@code n} peers send {@code request} at once and take their answers only after two seconds, so that every
     * answer is owed at the same time; the answers, each read whole within its deadline.
     */
    private static List<RawClient.Joined> owedAtOnce(DaemonProcess d, Path socket, int n, byte[] request)
            throws Exception {
        List<RawClient> peers = new java.util.ArrayList<>();
        try {
            for (int i = 0; i < n; i++) {
                try {
                    RawClient c = RawClient.connect(socket);
                    peers.add(c);
                    c.handshake(2, 2);
                    c.send(request);
                } catch (java.io.IOException | java.util.concurrent.TimeoutException e) {
                    Thread.sleep(500);
                    throw new AssertionError("peer " + i + ": " + e + "; " + d.log(), e);
                }
            }
            Thread.sleep(2000);
            List<RawClient.Joined> answers = new java.util.ArrayList<>();
            for (RawClient c : peers) {
                answers.add(c.nextFrame(10_000));
            }
            return answers;
        } finally {
            peers.forEach(RawClient::close);
        }
    }

    /** The daemon is alive, did not run out of memory, and answers STATUS. */
    private static void assertLived(DaemonProcess d, Path socket) throws Exception {
        assertTrue(d.process.isAlive(), d.log());
        assertFalse(d.log().contains("OutOfMemoryError"), d.log());
        CliRun status = CliRun.of("status", "--socket", socket.toString());
        assertEquals(0, status.exit(), status.err());
    }

    /**
     * Within the limits but beyond the daemon's heap: the headers are parsed whole, and 100,000 tensors in one
     * file need more than a 40 MiB heap. serve says so in one line, before its socket, instead of dying of it.
     */
    @Test
    void shouldRefuseInOneLineAHeaderTooLargeForTheDaemonsHeap(@TempDir Path dir) throws Exception {
        SafetensorsWriter w = new SafetensorsWriter();
        for (int i = 0; i < 100_000; i++) {
            w.add(String.format("t%07d", i), DType.U8, new long[] {0}, new byte[0]);
        }
        Path file = w.write(dir.resolve("many.safetensors"));
        Path socket = dir.resolve("run/h.sock");
        List<String> cmd = new java.util.ArrayList<>(ChildJvm.command("serve", "--checkpoint", file.toString(), "--numa",
                "none", "--socket", socket.toString()));
        cmd.add(cmd.indexOf("-cp"), "-Xmx40m"); // after the daemon's own -Xmx: the last one counts
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(1, p.waitFor(), out);
        assertEquals(1, out.lines().count(), out);
        assertTrue(out.startsWith("engram-host serve: the checkpoint's headers do not fit in this daemon's heap (max ")
                && out.contains("ENGRAM_HOST_JVM_OPTS=-Xmx"), out);
        assertFalse(Files.exists(socket.getParent()), "refused before the socket's directory was made");
    }
}
