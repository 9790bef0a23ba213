package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.protocol.Expectation;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A daemon in another pid namespace (a container): its WELCOME names its pid in its own namespace (1 here), which in
 * the client's namespace is another process. The client's daemonPid() is the pid SO_PEERCRED gives, which the
 * kernel translates into the client's namespace. The daemon is impostor_daemon.py under {@code unshare --pid --fork}
 * (root only; skipped elsewhere).
 */
@Timeout(120)
class PidNamespaceTest {
    private static Path dir;

    @BeforeAll
    static void setUp() throws Exception {
        dir = Impostor.sharedDir("engram-pidns-");
    }

    @AfterAll
    static void tearDown() throws Exception {
        Impostor.deleteTree(dir);
    }

    private static boolean canUnsharePid() {
        try {
            Process p = new ProcessBuilder("unshare", "--pid", "--fork", "true").redirectErrorStream(true).start();
            p.getInputStream().readAllBytes();
            return p.waitFor(20, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (Exception e) {
            return false;
        }
    }

    /** The pid of the impostor itself: the child unshare forked. */
    private static int childOf(long pid) throws Exception {
        Path children = Path.of("/proc/" + pid + "/task/" + pid + "/children");
        for (int i = 0; i < 500; i++) {
            String s = Files.readString(children).trim();
            if (!s.isEmpty()) {
                return Integer.parseInt(s.split(" ")[0]);
            }
            Thread.sleep(10);
        }
        throw new AssertionError("unshare (pid " + pid + ") has no child");
    }

    @Test
    void shouldWatchTheDaemonsPidInThisNamespaceNotWelcomes() throws Exception {
        assumeTrue(canUnsharePid(), "unshare --pid --fork does not run here (needs root)");
        try (Impostor i = Impostor.start(dir, "pidns", "good", List.of("unshare", "--pid", "--fork"))) {
            int real = childOf(i.process.pid());
            try (ImportedTables tables = EngramClient.connect(i.socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(real, tables.daemonPid(), "SO_PEERCRED's pid, translated into this namespace");
                assertNotEquals(1, tables.daemonPid(), "not WELCOME's pid, which names this namespace's pid 1");
                assertNull(tables.daemonGoneReason(), "pid 1 here, or the impostor, is still running");
                ProcessHandle.of(real).orElseThrow().destroyForcibly(); // the impostor, pid 1 of its namespace
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (tables.daemonGoneReason() == null && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                String reason = tables.daemonGoneReason();
                assertTrue(reason != null, "the daemon's exit is seen");
            }
        }
    }
}
