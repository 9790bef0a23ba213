package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.daemon.Daemon;
import io.engramhost.daemon.DaemonContext;
import io.engramhost.daemon.DaemonLauncher;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.DaemonState;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code status --ready}, the probe: one line, exit 0 only when a daemon answers and is ready. The probe is a
 * separate process each time. Ready, silent (SIGSTOP) and gone are a daemon process; loading, failed and
 * stopping are a daemon in this JVM whose load waits on the test, since a daemon process gives no time in
 * those states that a test could count on.
 */
@Timeout(180)
class StatusReadyTest {
    @Test
    void shouldExitZeroOnlyWhileADaemonProcessAnswersReady(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/r.sock");
        CliRun none = CliRun.of("status", "--ready", "--socket", socket.toString());
        assertEquals(1, none.exit(), none.out() + none.err());
        assertEquals("not ready: no daemon: " + socket + " does not exist", none.out().strip());
        assertEquals(1, none.out().lines().count(), none.out());
        assertEquals("", none.err());

        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 1000,
                64, 3));
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString())
                .awaitReady()) {
            CliRun ready = CliRun.of("status", "--ready", "--socket", socket.toString());
            assertEquals(0, ready.exit(), ready.out() + ready.err());
            assertTrue(ready.out().startsWith("ready: pid " + d.pid() + ", 2 tables, fingerprint "), ready.out());
            assertEquals(1, ready.out().lines().count(), ready.out());

            signal("STOP", d.pid()); // alive but silent: the probe must not pass, nor hang
            try {
                long t0 = System.nanoTime();
                CliRun silent = CliRun.of("status", "--ready", "--timeout-ms", "1000", "--socket", socket.toString());
                assertEquals(1, silent.exit(), silent.out() + silent.err());
                assertTrue(silent.out().startsWith("not ready: "), silent.out());
                assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(30), "bounded by --timeout-ms");
            } finally {
                signal("CONT", d.pid());
            }
            CliRun again = CliRun.of("status", "--ready", "--socket", socket.toString());
            assertEquals(0, again.exit(), again.out() + again.err());

            CliRun stop = CliRun.of("stop", "--socket", socket.toString());
            assertEquals(0, stop.exit(), stop.err());
            assertTrue(d.process.waitFor(30, TimeUnit.SECONDS), "daemon exits after stop");
        }
        CliRun gone = CliRun.of("status", "--ready", "--socket", socket.toString());
        assertEquals(1, gone.exit(), gone.out() + gone.err());
        assertEquals("not ready: no daemon: " + socket + " does not exist", gone.out().strip(), "the daemon removed it");
    }

    @Test
    void shouldExitOneWhileLoadingFailedOrStopping(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/l.sock");
        CountDownLatch release = new CountDownLatch(1);
        DaemonContext context = new DaemonContext().socket(socket).numa("none").threads(1).catalog(progress -> {
            release.await();
            throw new IllegalStateException("disk on fire");
        });
        try (Daemon daemon = DaemonLauncher.start(context, DaemonLauncher.Environment.none())) {
            CliRun loading = CliRun.of("status", "--ready", "--socket", socket.toString());
            assertEquals(1, loading.exit(), loading.out() + loading.err());
            assertEquals("not ready: daemon pid " + daemon.pid() + " is loading", loading.out().strip()
                    .replaceFirst(" \\(.*\\)$", ""), loading.out());

            release.countDown();
            Exception failure = assertThrows(IllegalStateException.class, daemon::awaitReady);
            assertEquals("disk on fire", failure.getMessage());
            assertEquals(DaemonState.FAILED, daemon.state());
            CliRun failed = CliRun.of("status", "--ready", "--socket", socket.toString());
            assertEquals(1, failed.exit(), failed.out() + failed.err());
            assertEquals("not ready: daemon pid " + daemon.pid() + " is failed: disk on fire", failed.out().strip());

            daemon.requestStop("test");
            CliRun stopping = CliRun.of("status", "--ready", "--socket", socket.toString());
            assertEquals(1, stopping.exit(), stopping.out() + stopping.err());
            assertTrue(stopping.out().startsWith("not ready: daemon pid " + daemon.pid() + " is stopping"),
                    stopping.out());
        }
    }

    private static void signal(String name, long pid) throws Exception {
        Process kill = new ProcessBuilder("kill", "-" + name, Long.toString(pid)).inheritIO().start();
        assertEquals(0, kill.waitFor(), "kill -" + name);
    }
}
