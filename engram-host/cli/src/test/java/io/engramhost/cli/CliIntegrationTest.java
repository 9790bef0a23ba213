package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.json.JsonReader;
import io.engramhost.protocol.SocketPaths;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The daemon and its clients as separate processes, driven through the CLI as a user would. */
@Timeout(180)
class CliIntegrationTest {

    /** A checkpoint with every dtype, a scalar and empty tensors, in one file. */
    static Path everyDtype(Path dir) throws Exception {
        return everyDtype(new Random(7)).write(dir.resolve("all.safetensors"));
    }

    /** The tensors of {@link #everyDtype(Path)}, random bytes from {@code rnd}, for a test to add to. */
    static SafetensorsWriter everyDtype(Random rnd) {
        SafetensorsWriter w = new SafetensorsWriter();
        for (DType d : DType.values()) {
            long[] shape = d.bits() < 8 ? new long[] {3, 8} : new long[] {5, 3};
            byte[] b = new byte[(int) d.byteLength(shape)];
            rnd.nextBytes(b);
            w.add("t." + d.name(), d, shape, b);
        }
        w.add("scalar.f32", DType.F32, new long[] {}, new byte[] {1, 2, 3, 4});
        w.add("empty.bf16", DType.BF16, new long[] {0, 16}, new byte[0]);
        w.add("empty.f4", DType.F4, new long[] {4, 0}, new byte[0]);
        return w;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Map<String, Object>> importedTables(String json) {
        Map<String, Object> doc = (Map<String, Object>) JsonReader.parse(json.strip());
        Map<String, Map<String, Object>> out = new HashMap<>();
        for (Object o : (List<Object>) doc.get("tables")) {
            Map<String, Object> t = (Map<String, Object>) o;
            out.put((String) t.get("name"), t);
        }
        return out;
    }

    /** {@code import --json} names its timings as it always has (ImportTimings and RegionTimings turned into maps). */
    private static void assertTimingKeys(String importJson) {
        Map<?, ?> doc = (Map<?, ?>) JsonReader.parse(importJson.strip());
        Map<?, ?> timings = (Map<?, ?>) doc.get("timings");
        assertEquals(List.of("native_init_ms", "handshake_ms", "manifest_ms", "map_ms", "attach_ms", "total_ms",
                "import_ms"), List.copyOf(timings.keySet()), importJson);
        for (Object t : (List<?>) doc.get("tables")) {
            Map<?, ?> attach = (Map<?, ?>) ((Map<?, ?>) t).get("attach");
            assertEquals(List.of("mmap_ms"), List.copyOf(attach.keySet()), importJson);
            assertTrue(((Number) attach.get("mmap_ms")).doubleValue() >= 0, importJson);
        }
    }

    private static void assertDigestsMatch(Path checkpoint, String importJson) throws Exception {
        Map<String, Map<String, Object>> tables = importedTables(importJson);
        Checkpoint cp = Checkpoint.open(List.of(checkpoint));
        assertEquals(cp.tensors().size(), tables.size(), "every tensor imported");
        for (TensorInfo t : cp.tensors()) {
            Map<String, Object> row = tables.get(t.name());
            assertEquals(DemoCommand.sha256(t), row.get("sha256"), "sha256 of " + t.name());
            assertEquals(t.dtype().name(), row.get("dtype"));
            assertEquals(t.length(), ((Number) row.get("bytes")).longValue());
        }
    }

    @Test
    void shouldImportEveryDtypeScalarAndEmptyTensorBitExactly(@TempDir Path dir) throws Exception {
        Path ckpt = everyDtype(dir);
        Path socket = dir.resolve("run/e.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString()).awaitReady()) {
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--digest", "sha256", "--json");
            assertEquals(0, r.exit(), r.err());
            assertDigestsMatch(ckpt, r.out());
            CliRun v = CliRun.of("import", "--socket", socket.toString(), "--digest", "engram");
            assertEquals(0, v.exit(), v.err());
            assertTrue(v.out().contains("(verified)"), v.out());
            if (!io.engramhost.cuda.Cuda.available()) { // the driver is loaded before the arguments are parsed
                CliRun g = CliRun.of("import", "--socket", socket.toString(), "--json", "--gpu");
                assertEquals(1, g.exit(), g.err());
                assertEquals("engram-host import: CUDA is not available: " + io.engramhost.cuda.Cuda.unavailabilityCause()
                        + "; for CPU views only, connect without a GPU view (no ClientOptions.withGpu; engram-host"
                        + " import without --gpu)\n", g.err(), "the message names the way out");
                assertEquals("", g.out());
            }
        }
    }

    @Test
    void shouldServeShardedCheckpointAndStopCleanly(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 14), 4000, 256, 3));
        Path socket = dir.resolve("run/s.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString()).awaitReady()) {
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--digest", "sha256", "--json",
                    "--expect-checkpoint", index.toString());
            assertEquals(0, r.exit(), r.err());
            assertDigestsMatch(index, r.out());
            assertTimingKeys(r.out());
            CliRun status = CliRun.of("status", "--socket", socket.toString(), "--json");
            assertEquals(0, status.exit(), status.err());
            assertTrue(status.out().contains("\"state\":\"ready\""), status.out());
            Map<?, ?> load = (Map<?, ?>) ((Map<?, ?>) JsonReader.parse(status.out().strip())).get("load");
            assertEquals(List.of("create_s", "create_gib_s", "read_s", "read_gib_s", "read_direct_bytes", "verify_seal_s"),
                    List.copyOf(load.keySet()), status.out());
            Map<?, ?> all = (Map<?, ?>) JsonReader.parse(status.out().strip());
            for (String k : List.of("ready_s", "process_ready_s", "ready_gib_s")) {
                assertTrue(all.get(k) instanceof Number n && n.doubleValue() > 0, k + " in " + status.out());
            }
            assertTrue(((Number) all.get("process_ready_s")).doubleValue() > ((Number) all.get("ready_s")).doubleValue(),
                    "the process started before its load: " + status.out());
            CliRun stop = CliRun.of("stop", "--socket", socket.toString());
            assertEquals(0, stop.exit(), stop.err());
            assertTrue(d.process.waitFor(20, java.util.concurrent.TimeUnit.SECONDS));
            assertEquals(0, d.process.exitValue(), d.log());
            assertFalse(Files.exists(socket));
            assertFalse(Files.exists(SocketPaths.readyFile(socket)));
        }
    }

    @Test
    void shouldRefuseASecondDaemonAndCleanUpAfterADeadOne(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 1000, 64, 3));
        Path socket = dir.resolve("run/x.sock");
        try (DaemonProcess first = DaemonProcess.start(socket, dir.resolve("a.log"), "--checkpoint", index.toString()).awaitReady()) {
            CliRun second = CliRun.of("serve", "--socket", socket.toString(), "--checkpoint", index.toString(), "--numa", "none");
            assertEquals(1, second.exit());
            assertTrue(second.err().contains("already running (pid=" + first.pid() + ")"), second.err());
            assertEquals(1, second.err().lines().filter(l -> l.startsWith("engram-host serve: ")).count(), second.err());
            assertFalse(second.err().contains("\tat "), "no stack trace: " + second.err());
            first.process.destroyForcibly().waitFor();
        }
        assertTrue(Files.exists(socket), "a killed daemon leaves its socket");
        assertTrue(Files.exists(SocketPaths.readyFile(socket)), "and its ready file");
        CliRun refused = CliRun.of("import", "--socket", socket.toString());
        assertEquals(1, refused.exit());
        assertTrue(refused.err().contains("refused"), refused.err());
        try (DaemonProcess next = DaemonProcess.start(socket, dir.resolve("b.log"), "--checkpoint", index.toString()).awaitReady()) {
            assertTrue(next.log().contains("left by a daemon that is gone"), next.log());
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--digest", "sha256", "--json");
            assertEquals(0, r.exit(), r.err());
        }
    }

    @Test
    void shouldRefuseAFingerprintMismatchListingTheDifferences(@TempDir Path dir) throws Exception {
        Path served = CheckpointGenerator.writeSharded(dir.resolve("a"), new CheckpointGenerator.Spec(List.of(1), 1000, 64, 3));
        Path other = CheckpointGenerator.writeSharded(dir.resolve("b"), new CheckpointGenerator.Spec(List.of(1), 2000, 64, 3));
        Path socket = dir.resolve("run/f.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", served.toString()).awaitReady()) {
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint", other.toString());
            assertEquals(1, r.exit());
            assertTrue(r.err().contains("FINGERPRINT_MISMATCH"), r.err());
            assertTrue(r.err().contains("engram.layers.1.embedding.weight"), "differences name the table: " + r.err());
            CliRun sha = CliRun.of("import", "--socket", socket.toString(), "--expect", "0".repeat(64));
            assertEquals(1, sha.exit());
            assertTrue(sha.err().contains("expected fingerprint " + "0".repeat(64)), sha.err());
            assertEquals(List.of("engram-host import: FINGERPRINT_MISMATCH: the daemon on " + socket + " serves"
                    + " fingerprint " + r.err().split("serves fingerprint ")[1].substring(0, 64) + ", not the expected"
                    + " checkpoint: 1 difference",
                    "  expected fingerprint " + "0".repeat(64) + " but the daemon serves "
                            + r.err().split("serves fingerprint ")[1].substring(0, 64),
                    "  the daemon serves 2 tables from 1 file: engram.layers.1.embedding.scale, ..."),
                    sha.err().lines().toList(), "a short expectation is shown the daemon's record in short");
        }
    }

    @Test
    void shouldRemoveSocketAndReadyFileOnSigterm(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 1000, 64, 3));
        Path socket = dir.resolve("run/t.sock");
        DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString()).awaitReady();
        d.process.destroy(); // SIGTERM
        assertTrue(d.process.waitFor(20, java.util.concurrent.TimeUnit.SECONDS));
        assertFalse(Files.exists(socket), "socket removed: " + d.log());
        assertFalse(Files.exists(SocketPaths.readyFile(socket)), "ready file removed");
        assertTrue(d.log().contains("stopped (signal)"), d.log());
    }

    @Test
    void shouldRefuseHugetlbAtOnceWhenNoHugePagesAreReserved(@TempDir Path dir) throws Exception {
        long reserved = Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim());
        org.junit.jupiter.api.Assumptions.assumeTrue(reserved == 0, "vm.nr_hugepages=" + reserved + " here");
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 20000, 256, 3));
        Path socket = dir.resolve("run/h.sock");
        CliRun r = CliRun.of("serve", "--checkpoint", index.toString(), "--backend", "memfd-hugetlb", "--numa", "none",
                "--socket", socket.toString());
        assertEquals(1, r.exit(), r.err());
        assertTrue(r.err().contains("huge pages") && r.err().contains("vm.nr_hugepages"), r.err());
        assertFalse(Files.exists(socket), "refused before the socket was taken");
    }

    @Test
    void shouldRejectMalformedCheckpointsWithOneLine(@TempDir Path dir) throws Exception {
        Path bad = dir.resolve("bad.safetensors");
        byte[] header = "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[10,256],\"data_offsets\":[0,2559]}}".getBytes();
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(8 + header.length + 2559).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        b.putLong(header.length).put(header);
        Files.write(bad, b.array());
        CliRun serve = CliRun.of("serve", "--checkpoint", bad.toString(), "--socket", dir.resolve("b.sock").toString());
        assertEquals(1, serve.exit());
        assertTrue(serve.err().contains("bad.safetensors") && serve.err().contains("'w'"), serve.err());
        assertFalse(Files.exists(dir.resolve("b.sock")), "no socket for a bad checkpoint");
        CliRun inspect = CliRun.of("inspect", bad.toString(), "--json");
        assertEquals(1, inspect.exit());
        assertTrue(inspect.out().contains("\"valid\":false"), inspect.out());
        CliRun usage = CliRun.of("serve", "--backend", "tape", "--checkpoint", bad.toString());
        assertEquals(2, usage.exit(), usage.err());
        assertTrue(usage.err().contains("'--backend'") && usage.err().contains("'tape' is not one of memfd, "
                + "memfd-hugetlb, cuda-vmm"), usage.err());
        CliRun memfdRuns = CliRun.of("serve", "--backend", "memfd", "--region-max", "1G", "--checkpoint",
                bad.toString());
        assertEquals(2, memfdRuns.exit(), memfdRuns.err());
        assertTrue(memfdRuns.err().contains("--region-max applies to --backend cuda-vmm only"), memfdRuns.err());
        CliRun odd = CliRun.of("serve", "--backend", "cuda-vmm", "--region-max", "100M", "--checkpoint",
                bad.toString());
        assertEquals(2, odd.exit(), odd.err());
        assertTrue(odd.err().contains("--region-max 100.0 MiB: a multiple of 64 MiB (e.g. 2G), or 0"), odd.err());
        CliRun none = CliRun.of("serve", "--backend", "cuda-vmm", "--region-max", "0", "--checkpoint", bad.toString(),
                "--socket", dir.resolve("c.sock").toString());
        assertEquals(1, none.exit(), "--region-max 0 is taken (one region per table); the checkpoint is refused: "
                + none.err());
        assertEquals(0L, new ServeCommand.SizeOrZeroConverter().convert("0"));
        assertEquals(0L, new ServeCommand.SizeOrZeroConverter().convert("0G"));
        assertEquals(2L << 30, new ServeCommand.SizeOrZeroConverter().convert("2G"));
        picocli.CommandLine cli = new picocli.CommandLine(new Main());
        for (String command : List.of("serve", "inspect", "demo")) {
            String help = cli.getSubcommands().get(command).getUsageMessage();
            assertTrue(help.replaceAll("\\s+", "").contains("ofmemfd,memfd-hugetlb,cuda-vmm(default:memfd)"), help);
        }
        String importHelp = cli.getSubcommands().get("import").getUsageMessage();
        assertTrue(importHelp.replaceAll("\\s+", "").contains("Oneofsha256,engram."), importHelp);
        CliRun digest = CliRun.of("import", "--socket", dir.resolve("b.sock").toString(), "--digest", "md5");
        assertEquals(2, digest.exit(), digest.err());
        assertTrue(digest.err().contains("'--digest'") && digest.err().contains("'md5' is not one of sha256, engram"),
                digest.err());
    }
}
