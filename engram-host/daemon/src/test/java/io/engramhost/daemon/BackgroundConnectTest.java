package io.engramhost.daemon;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.DaemonAbsentException;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.FingerprintMismatchException;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.PendingTables;
import io.engramhost.os.Fd;
import io.engramhost.os.JvmFlags;
import io.engramhost.os.ProcessProbe;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Expectation;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link EngramClient#connectInBackground} against a daemon in this JVM over a real socket and real memfds (its load
 * held until the test lets it go): the handle comes back at once and the tables when the attach completes; errors
 * at await as connect throws them, a timeout, a close before completion that leaves nothing, a JVM exiting first.
 */
@Timeout(120)
class BackgroundConnectTest {
    private static final Pattern OPEN = Pattern.compile("\"connections\":\\{\"open\":([0-9]+),\"leases\":([0-9]+)");
    private static final ClientOptions WAITING = ClientOptions.defaults().withNotReadyWait(60_000);

    /** The daemon's open connections and leases, from its STATUS document. */
    private static String connections(Daemon d) {
        Matcher m = OPEN.matcher(d.statusJson());
        assertTrue(m.find(), d.statusJson());
        return "open=" + m.group(1) + " leases=" + m.group(2);
    }

    /** {@link #connections} once it is {@code expected}, or as it is after 10 s. */
    private static String settled(Daemon d, String expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!connections(d).equals(expected) && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        return connections(d);
    }

    private static long attachThreads() {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.isAlive() && t.getName().equals("engram-attach")).count();
    }

    /** The fds this JVM holds of the kinds engram-host makes, and those owned through {@link Fd}, once settled. */
    private static String fdsSettled(String expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        String now;
        while (!(now = ProcessProbe.countOpenFds() + " " + Fd.openCount()).equals(expected)
                && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        return now;
    }

    private static String fds() {
        return ProcessProbe.countOpenFds() + " " + Fd.openCount();
    }

    @Test
    void shouldGiveTheTablesOnceTheDaemonHasLoaded(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/b.sock");
        TestDaemons.Held held = new TestDaemons.Held(DaemonClientTest::catalog);
        try (Daemon daemon = TestDaemons.start(TestDaemons.context(socket, held, Set.of()))) {
            long t0 = System.nanoTime();
            PendingTables pending = EngramClient.connectInBackground(socket, Expectation.any(), WAITING);
            assertTrue(System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(500), "returns at once");
            assertFalse(pending.isReady(), "the daemon is still loading");
            TimeoutException timedOut = assertThrows(TimeoutException.class,
                    () -> pending.await(Duration.ofMillis(200)));
            assertTrue(timedOut.getMessage().contains("still attaching"), timedOut.getMessage());
            assertFalse(pending.isReady(), "a timeout leaves the attach going on");
            held.open();
            ImportedTables tables = pending.await(Duration.ofSeconds(30));
            assertTrue(pending.isReady());
            assertSame(tables, pending.await(), "the same tables on every call");
            assertEquals(15 * 3L, tables.table("t.weight").getLong(15 * 8));
            assertEquals(ImportedTables.Source.DAEMON, tables.source());
            assertEquals("open=1 leases=1", settled(daemon, "open=1 leases=1"));
            pending.close();
            assertTrue(tables.isClosed(), "closing the handle closes the tables it gave");
            assertEquals("open=0 leases=0", settled(daemon, "open=0 leases=0"));
            EngramClientException closed = assertThrows(EngramClientException.class, pending::await);
            assertTrue(closed.getMessage().contains("was closed"), closed.getMessage());
        }
    }

    @Test
    void shouldThrowAtAwaitWhatConnectThrows(@TempDir Path dir) throws Exception {
        PendingTables absent = EngramClient.connectInBackground(dir.resolve("none.sock"), Expectation.any(),
                ClientOptions.defaults());
        DaemonAbsentException first = assertThrows(DaemonAbsentException.class, absent::await);
        assertTrue(absent.isReady());
        assertSame(first, assertThrows(DaemonAbsentException.class, absent::await), "the same exception every time");
        assertTrue(first.getMessage().contains("none.sock"), first.getMessage());
        absent.close();

        Path socket = dir.resolve("run/e.sock");
        TestDaemons.Held held = new TestDaemons.Held(DaemonClientTest::catalog);
        try (Daemon daemon = TestDaemons.start(TestDaemons.context(socket, held, Set.of()))) {
            try (PendingTables notReady = EngramClient.connectInBackground(socket, Expectation.any(),
                    ClientOptions.defaults())) {
                EngramClientException refused = assertThrows(EngramClientException.class, notReady::await);
                assertEquals(ErrorCode.NOT_READY, refused.code(), "a refusal, as connect throws it");
            }
            held.open();
            daemon.awaitReady();
            try (PendingTables mismatch = EngramClient.connectInBackground(socket, Expectation.sha256("ab".repeat(32)),
                    ClientOptions.defaults())) {
                FingerprintMismatchException e = assertThrows(FingerprintMismatchException.class, mismatch::await);
                assertEquals(ErrorCode.FINGERPRINT_MISMATCH, e.code());
                assertEquals(List.of("expected something else"), e.details());
            }
            assertThrows(NullPointerException.class, () -> EngramClient.connectInBackground(socket, null, WAITING),
                    "an argument missing throws on the caller");
            assertEquals("open=0 leases=0", settled(daemon, "open=0 leases=0"));
        }
    }

    @Test
    void shouldLeaveNothingWhenClosedBeforeCompletion(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/c.sock");
        TestDaemons.Held held = new TestDaemons.Held(DaemonClientTest::catalog);
        try (Daemon daemon = TestDaemons.start(TestDaemons.context(socket, held, Set.of()))) {
            // warm-up: what the JVM opens once for a first import
            EngramClient.connectInBackground(socket, Expectation.any(), ClientOptions.defaults()).close();
            assertEquals("open=0 leases=0", settled(daemon, "open=0 leases=0"));
            String before = fdsSettled(fds());
            PendingTables pending = EngramClient.connectInBackground(socket, Expectation.any(), WAITING);
            assertEquals("open=1 leases=0", settled(daemon, "open=1 leases=0"), "retrying while the daemon loads");
            long t0 = System.nanoTime();
            pending.close();
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2), "the retry's sleep ends at once");
            assertTrue(pending.isReady() && pending.isClosed());
            assertEquals(0, attachThreads());
            assertEquals("open=0 leases=0", settled(daemon, "open=0 leases=0"), "the daemon saw the connection end");
            assertEquals(before, fdsSettled(before), "no fd left, in client or daemon");

            // at any moment of a served import: before the handshake, during the attach, after it
            held.open();
            daemon.awaitReady();
            String served = fdsSettled(fds()); // the daemon's memfd now
            List<String> landed = new ArrayList<>();
            for (long micros : new long[] {0, 200, 1000, 5000, 50_000}) {
                PendingTables p = EngramClient.connectInBackground(socket, Expectation.any(), ClientOptions.defaults());
                TimeUnit.MICROSECONDS.sleep(micros);
                landed.add(p.isReady() ? "finished" : "attaching");
                p.close();
                assertEquals(0, attachThreads());
                assertEquals("open=0 leases=0", settled(daemon, "open=0 leases=0"), micros + " us: " + landed);
                assertEquals(served, fdsSettled(served), micros + " us: " + landed);
            }
        }
    }

    @Test
    void shouldWakeAWaitForAnAnswerWhenClosed(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("silent.sock");
        // listens, never accepts: the connect succeeds, HELLO is buffered, WELCOME never comes
        try (Fd listener = UnixSockets.listen(socket, 8)) {
            String before = fds();
            PendingTables pending = EngramClient.connectInBackground(socket, Expectation.any(), ClientOptions.defaults());
            assertThrows(TimeoutException.class, () -> pending.await(Duration.ofMillis(300)));
            long t0 = System.nanoTime();
            pending.close();
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2), "the shutdown ends the receive at once");
            assertEquals(0, attachThreads());
            assertEquals(before, fdsSettled(before));
        }
    }

    /** A child JVM that starts a background connect and returns from main while it waits for a loading daemon. */
    static final class ExitingEngine {
        public static void main(String[] args) throws Exception {
            PendingTables p = EngramClient.connectInBackground(Path.of(args[0]), Expectation.any(), WAITING);
            Thread.sleep(300);
            System.out.println((p.isReady() ? "ready " : "attaching ") + System.currentTimeMillis());
        }
    }

    @Test
    void shouldLetAJvmExitWhileItsConnectRuns(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/x.sock");
        TestDaemons.Held held = new TestDaemons.Held(DaemonClientTest::catalog);
        try (Daemon daemon = TestDaemons.start(TestDaemons.context(socket, held, Set.of()))) {
            List<String> cmd = new ArrayList<>();
            cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
            cmd.addAll(JvmFlags.get());
            cmd.add("-cp");
            cmd.add(System.getProperty("surefire.test.class.path", System.getProperty("java.class.path")));
            cmd.add(ExitingEngine.class.getName());
            cmd.add(socket.toString());
            Path log = dir.resolve("child.log");
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the child JVM exits");
            long ended = System.currentTimeMillis();
            String out = Files.readString(log, StandardCharsets.UTF_8).strip();
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.startsWith("attaching "), out);
            long exitMillis = ended - Long.parseLong(out.substring("attaching ".length()));
            assertTrue(exitMillis < 3000, "the exit waited " + exitMillis + " ms");
            assertEquals("open=0 leases=0", settled(daemon, "open=0 leases=0"), "the daemon saw the connection end");
        }
    }
}
