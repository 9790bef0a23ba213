package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.cli.testing.EnvGateHooks;
import io.engramhost.cli.testing.TestJvm;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The fault-injection gates ({@code ENGRAM_HOST_TEST_*}) live in the test jar: the shipped CLI ({@code Main}, what
 * bin/engram-host and the release run) ignores every one of them, and the test launcher ({@code TestMain}, what
 * bin/engram-host-test runs) honours them, with the same variables, values and log lines as before.
 */
@Timeout(180)
class TestGatesTest {
    private static final Map<String, String> EVERY_GATE = Map.of(
            EnvGateHooks.LOAD_GATE, "before-read:/nonexistent/engram-gate",
            EnvGateHooks.HANDOVER_GATE, "accepted:/nonexistent/engram-gate",
            EnvGateHooks.TAKEOVER_GATE, "request:/nonexistent/engram-gate",
            EnvGateHooks.GPU_NUMA_NODES, "not a list");

    private static Process serve(List<String> command, Path log, Map<String, String> env) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().putAll(env);
        return pb.start();
    }

    private static boolean readyWithin(Process p, Path socket, long millis) throws Exception {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        while (System.nanoTime() < deadline && p.isAlive()) {
            if (String.valueOf(p.pid()).equals(ReadyFile.read(SocketPaths.readyFile(socket)).get("pid"))) {
                return true;
            }
            Thread.sleep(20);
        }
        return false;
    }

    private static void stop(Process p) throws Exception {
        p.destroy();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), "the daemon stops on SIGTERM");
    }

    @Test
    void theShippedCliIgnoresEveryGate(@TempDir Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSharded(dir.resolve("ckpt"),
                new CheckpointGenerator.Spec(List.of(1), 256, 64, 3));
        Path socket = dir.resolve("run/s.sock");
        Path log = dir.resolve("serve.log");
        Process p = serve(ChildJvm.command("serve", "--socket", socket.toString(), "--numa", "auto", "--checkpoint",
                ckpt.toString()), log, EVERY_GATE);
        try {
            assertTrue(readyWithin(p, socket, 60_000), "not held: " + Files.readString(log));
            String out = Files.readString(log);
            assertFalse(out.contains("TEST ONLY"), out);
            Path log2 = dir.resolve("successor.log");
            Process successor = serve(ChildJvm.command("serve", "--socket", socket.toString(), "--numa", "none",
                    "--checkpoint", ckpt.toString(), "--takeover"), log2, EVERY_GATE);
            try {
                assertTrue(readyWithin(successor, socket, 60_000), "a takeover with the handover and takeover gates"
                        + " set is not held: " + Files.readString(log2));
                assertTrue(p.waitFor(30, TimeUnit.SECONDS), "the predecessor exits once it handed over");
                assertEquals(0, p.exitValue());
                assertFalse(Files.readString(log2).contains("TEST ONLY"), Files.readString(log2));
            } finally {
                stop(successor);
            }
        } finally {
            p.destroyForcibly();
            p.waitFor(30, TimeUnit.SECONDS);
        }
    }

    @Test
    void theTestLauncherHoldsAtItsGatesAsBefore(@TempDir Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSharded(dir.resolve("ckpt"),
                new CheckpointGenerator.Spec(List.of(1), 256, 64, 3));
        Path socket = dir.resolve("run/t.sock");
        Path gate = dir.resolve("gate");
        Path log = dir.resolve("serve.log");
        Process p = serve(TestJvm.command("serve", "--socket", socket.toString(), "--numa", "auto", "--checkpoint",
                ckpt.toString()), log, Map.of(EnvGateHooks.LOAD_GATE, "before-read:" + gate,
                        EnvGateHooks.GPU_NUMA_NODES, "0"));
        try {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!Files.readString(log).contains("load held at 'before-read'") && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            String held = Files.readString(log);
            assertTrue(held.contains("engram-host: TEST ONLY (" + EnvGateHooks.LOAD_GATE + "=before-read:" + gate
                    + "): load held at 'before-read' until " + gate + " exists"), held);
            assertTrue(held.contains("engram-host: TEST ONLY (" + EnvGateHooks.GPU_NUMA_NODES + "=0): --numa auto takes"
                    + " the GPUs' NUMA nodes from this variable, not from the GPUs"), held);
            assertFalse(readyWithin(p, socket, 500), "held before its first read");
            Files.writeString(gate, "go");
            assertTrue(readyWithin(p, socket, 60_000), Files.readString(log));
        } finally {
            stop(p);
        }
    }
}
