package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.protocol.Expectation;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A peer that forks a new process for every attempt cannot flood the daemon's log: refusals are logged once per
 * peer process, and at most {@code ConnectionStats.LINES_PER_UID} (20) per uid and kind a minute, then one line saying
 * the rest are not logged. Before, 200 refused processes made 200 lines (3,000 made 3,000, at the rate of fork).
 */
@Timeout(180)
class LogRateProcessTest {
    private static final String PYTHON = "/usr/bin/python3";

    /** Forks {@code n} children one after the other; each connects, reads what the daemon says, and exits. */
    private static final String FORKER = String.join("\n",
            "import os, socket, sys",
            "path, n = sys.argv[1], int(sys.argv[2])",
            "for i in range(n):",
            "    pid = os.fork()",
            "    if pid == 0:",
            "        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
            "        s.settimeout(10)",
            "        s.connect(path)",
            "        s.recv(4096)",
            "        os._exit(0)",
            "    os.waitpid(pid, 0)",
            "print('done', n)");

    @Test
    void aPeerThatForksForEveryAttemptGetsAtMostTwentyLinesAMinute(@TempDir Path dir) throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Path.of(PYTHON)), "needs " + PYTHON);
        Path ckpt = CheckpointGenerator.writeSharded(dir.resolve("ckpt"),
                new CheckpointGenerator.Spec(List.of(1), 1000, 256, 3));
        Path socket = dir.resolve("run/r.sock");
        // One connection per uid, taken by a lease (never evicted): every later connection of this uid is refused BUSY.
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString(),
                "--max-connections-per-uid", "1").awaitReady()) {
            try (ImportedTables lease = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                Process p = new ProcessBuilder(PYTHON, "-c", FORKER, socket.toString(), "200").redirectErrorStream(true)
                        .start();
                String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertTrue(p.waitFor(120, TimeUnit.SECONDS), out);
                assertEquals("done 200", out.strip());
                assertTrue(lease.tables().size() > 0);
            }
            // The lease ended: STATUS's connection is admitted again (it was the one connection this uid may hold).
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            String status;
            do {
                status = CliRun.of("status", "--socket", socket.toString(), "--json").out();
            } while (!status.contains("\"refused_busy\":200") && System.nanoTime() < deadline && sleep());
            assertTrue(status.contains("\"refused_busy\":200"), "STATUS counts every refusal: " + status);
            String log = d.log();
            long refusals = log.lines().filter(l -> l.contains("refused pid ")).count();
            long announced = log.lines().filter(l -> l.contains("caused 20 such lines (busy)")).count();
            assertEquals(20, refusals, log);
            assertEquals(1, announced, log);
        }
    }

    private static boolean sleep() throws InterruptedException {
        Thread.sleep(50);
        return true;
    }
}
