package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.cli.testing.EnvGateHooks;
import io.engramhost.cli.testing.TestJvm;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * What is served is what was validated: a daemon process (one reader thread) is held at a known point of
 * its load by the test-only gate ({@link EnvGateHooks#LOAD_GATE}) while the test changes its
 * checkpoint, then let go. Any change makes it refuse to become ready, with one line, and exit non-zero.
 */
@Timeout(180)
class CheckpointChangeTest {
    /** About 21 MB in one file: the 20 MB weight is two 16 MiB chunks, so "after a chunk" is mid-table. */
    static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 20_000,
                1024, 21));
    }

    /** A daemon started with the gate set; {@link #awaitHeld} returns once it waits at it. */
    static final class GatedDaemon implements AutoCloseable {
        final Process process;
        final Path socket;
        final Path log;
        final Path gate;

        GatedDaemon(Path dir, String when, Path checkpoint) throws Exception {
            socket = dir.resolve("run/g.sock");
            log = dir.resolve("daemon.log");
            gate = dir.resolve("gate");
            ProcessBuilder pb = new ProcessBuilder(TestJvm.command("serve", "--socket", socket.toString(), "--numa",
                    "none", "--threads", "1", "--checkpoint", checkpoint.toString())).redirectErrorStream(true)
                    .redirectOutput(log.toFile());
            pb.environment().put(EnvGateHooks.LOAD_GATE, when + ":" + gate);
            process = pb.start();
        }

        String log() throws Exception {
            return Files.readString(log, StandardCharsets.UTF_8);
        }

        void awaitHeld() throws Exception {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!log().contains("TEST ONLY (" + EnvGateHooks.LOAD_GATE)) {
                assertTrue(process.isAlive(), "daemon exited: " + log());
                assertTrue(System.nanoTime() < deadline, "the load never reached the gate: " + log());
                Thread.sleep(10);
            }
        }

        void release() throws Exception {
            Files.createFile(gate);
        }

        /** Waits for the process to exit and returns its status. */
        int awaitExit() throws Exception {
            assertTrue(process.waitFor(60, TimeUnit.SECONDS), "daemon still running: " + log());
            return process.exitValue();
        }

        void awaitReady() throws Exception {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!String.valueOf(process.pid()).equals(ReadyFile.read(SocketPaths.readyFile(socket)).get("pid"))) {
                assertTrue(process.isAlive(), "daemon exited: " + log());
                assertTrue(System.nanoTime() < deadline, "not ready: " + log());
                Thread.sleep(20);
            }
        }

        @Override
        public void close() throws Exception {
            if (process.isAlive()) {
                process.destroy();
                if (!process.waitFor(20, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                }
            }
        }
    }

    /** The refusal: exit 1, one line naming the file and what changed, no ready file, no socket left. */
    private static void assertRefused(GatedDaemon d, Path file, String what) throws Exception {
        assertEquals(1, d.awaitExit(), d.log());
        String expected = "engram-host serve: checkpoint " + file + " changed during the load (" + what
                + "): refusing to serve it; restart the daemon once the file is stable";
        assertTrue(d.log().lines().anyMatch(expected::equals), "expected the line\n" + expected + "\nin\n" + d.log());
        assertFalse(d.log().contains("engram-host: ready"), d.log());
        assertFalse(Files.exists(SocketPaths.readyFile(d.socket)), "never ready");
        assertFalse(Files.exists(d.socket), "socket removed");
    }

    @Test
    void shouldRefuseACheckpointOverwrittenInPlaceDuringTheLoad(@TempDir Path dir) throws Exception {
        Path file = checkpoint(dir);
        try (GatedDaemon d = new GatedDaemon(dir, "after-chunk", file)) {
            d.awaitHeld();
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
                raf.seek(raf.length() - (2 << 20)); // in a chunk not read yet
                raf.write(new byte[4096]);
            }
            d.release();
            assertRefused(d, file, "mtime, ctime");
        }
    }

    @Test
    void shouldRefuseACheckpointReplacedByRenameRightAfterValidation(@TempDir Path dir) throws Exception {
        Path file = checkpoint(dir);
        // the same tensors and the same size, the data in the other order: every offset moves
        Checkpoint cp = Checkpoint.open(file);
        List<TensorInfo> reversed = new ArrayList<>(cp.tensors());
        java.util.Collections.reverse(reversed);
        byte[][] bytes = new byte[reversed.size()][];
        for (int i = 0; i < reversed.size(); i++) {
            TensorInfo t = reversed.get(i);
            bytes[i] = new byte[(int) t.length()];
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "r")) {
                raf.seek(t.offset());
                raf.readFully(bytes[i]);
            }
        }
        SafetensorsWriter w = null;
        for (int pad = 0; pad < 64; pad++) { // metadata that pads the header to the original's length
            w = new SafetensorsWriter().metadata("pad", "x".repeat(pad));
            for (int i = 0; i < reversed.size(); i++) {
                w.add(reversed.get(i).name(), reversed.get(i).dtype(), reversed.get(i).shape(), bytes[i]);
            }
            if (8 + w.header().length + w.dataLength() == Files.size(file)) {
                break;
            }
        }
        Path replacement = w.write(dir.resolve("replacement.safetensors"));
        assertEquals(Files.size(file), Files.size(replacement), "same size");
        try (GatedDaemon d = new GatedDaemon(dir, "before-read", file)) {
            d.awaitHeld(); // validated, fingerprinted, not one byte read yet
            Files.move(replacement, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            d.release();
            assertRefused(d, file, "ctime, the path now names another file");
        }
    }

    @Test
    void shouldRefuseACheckpointTouchedDuringTheLoad(@TempDir Path dir) throws Exception {
        Path file = checkpoint(dir);
        try (GatedDaemon d = new GatedDaemon(dir, "after-chunk", file)) {
            d.awaitHeld();
            FileTime t = Files.getLastModifiedTime(file);
            Files.setLastModifiedTime(file, FileTime.from(t.toMillis() + 2000, TimeUnit.MILLISECONDS));
            d.release();
            assertRefused(d, file, "mtime, ctime");
        }
    }

    @Test
    void shouldServeAnUntouchedCheckpointWhoseBytesMatchTheFile(@TempDir Path dir) throws Exception {
        Path file = checkpoint(dir);
        try (GatedDaemon d = new GatedDaemon(dir, "after-chunk", file)) {
            d.awaitHeld();
            d.release();
            d.awaitReady();
            assertTrue(d.log().contains("checking the checkpoint is unchanged"), d.log());
            CliRun r = CliRun.of("import", "--socket", d.socket.toString(), "--digest", "sha256", "--json",
                    "--verify-content", file.toString());
            assertEquals(0, r.exit(), r.err());
            Map<String, Map<String, Object>> tables = CliIntegrationTest.importedTables(r.out());
            for (TensorInfo t : Checkpoint.open(file).tensors()) {
                assertEquals(DemoCommand.sha256(t), tables.get(t.name()).get("sha256"), t.name());
                assertEquals("verified", tables.get(t.name()).get("content"), t.name());
            }
        }
    }
}
