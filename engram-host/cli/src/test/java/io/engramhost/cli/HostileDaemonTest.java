package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.ImportedTables;
import io.engramhost.protocol.Expectation;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java client against a daemon that lies: conformance/protocol_peer.py, a daemon side written from
 * docs/protocol.md alone, answers each IMPORT with one case of "What a client checks of a MANIFEST" broken (the
 * Python package and the C client meet the same cases). The client refuses each, naming what is wrong, within its
 * answer's deadline, and leaves no fd open.
 */
@Timeout(120)
class HostileDaemonTest {
    private static final Path PEER = Path.of(System.getProperty("user.dir")).getParent().getParent()
            .resolve("conformance/protocol_peer.py");

    /** The peer serving one connection with {@code scenario} on {@code socket}, once it listens. */
    private static Process peer(Path socket, String scenario) throws Exception {
        Process p = new ProcessBuilder("python3", PEER.toString(), socket.toString(), scenario).redirectErrorStream(true)
                .redirectOutput(socket.resolveSibling("peer.log").toFile()).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!Files.exists(socket)) {
            assertTrue(p.isAlive() && System.nanoTime() < deadline, "the peer did not listen: " + peerLog(socket));
            Thread.sleep(10);
        }
        return p;
    }

    private static String peerLog(Path socket) throws IOException {
        Path log = socket.resolveSibling("peer.log");
        return Files.exists(log) ? Files.readString(log) : "";
    }

    private static void stop(Process p) throws IOException, InterruptedException {
        p.destroyForcibly();
        p.waitFor(10, TimeUnit.SECONDS);
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', value = {
        "wrong-bytes|table 't' is F16 [100], which is 200 bytes, but the manifest says 100",
        "huge-shape|table t [0, +281474976710656) lies outside its region of",
        "unknown-dtype|table 't' has dtype 'F9_E9M9', not a safetensors dtype",
        "duplicate-name|table 't' is listed twice",
        "control-name|table 't\\n2026 forged\\u001b[2J': its name holds a control character or a line separator",
        "control-dtype|table 't' has dtype 'U8\\u001b[2J', not a safetensors dtype",
        "bad-fingerprint-sha|fingerprint_sha256 is not the SHA-256 of the fingerprint it carries",
        "kind-mismatch|table 't' says kind 1, node 0, device -1 but its region 0 has 0, 0, -1",
        "future-write|missing WRITE (FUTURE_WRITE leaves writable a mapping made before it)",
        "outside-region|lies outside its region",
        "span-memfd|lies outside its region of",
        "span-past-end|table t [0, +5242880) runs past the last region: the run from region 0 lacks 1048576 bytes",
        "span-node|table t says kind 2, node 0, device -1 but region 1 of its run has 2, 1, -1",
        "span-kind|table t says kind 2, node 0, device -1 but region 1 of its run has 0, 0, -1",
    })
    void refusesAManifestThatLies(String scenario, String says, @TempDir Path dir) throws Exception {
        Path socket = dir.resolve("peer.sock");
        int fds = io.engramhost.os.ProcessProbe.countOpenFds();
        Process p = peer(socket, scenario);
        try {
            long t0 = System.nanoTime();
            RuntimeException e = assertThrows(RuntimeException.class,
                    () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()).close());
            assertTrue(e.getMessage().contains(says), scenario + " after " + (System.nanoTime() - t0) / 1e6 + " ms: "
                    + e.getMessage() + "; the peer: " + peerLog(socket));
        } finally {
            stop(p);
        }
        assertEquals(fds, io.engramhost.os.ProcessProbe.countOpenFds(), scenario + ": no fd left open");
    }

    /** A daemon's words that would start lines of their own or reach the terminal keep to their lines, escaped. */
    @Test
    void keepsADaemonsWordsOnTheirLines(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("peer.sock");
        Process p = peer(socket, "control-chars");
        try {
            RuntimeException e = assertThrows(RuntimeException.class,
                    () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()).close());
            assertEquals("INTERNAL: internal\\n2026-01-01T00:00:00.000Z engram-host: forged\\u001b[2J"
                    + System.lineSeparator() + "  - detail\\rforged\\u2028line\\u0085end", e.getMessage());
        } finally {
            stop(p);
        }
    }

    /** An old daemon's FUTURE_WRITE memfds are taken only when asked (an upgrade), and then read as served. */
    @Test
    void takesAFutureWriteSealOnlyWhenAsked(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("peer.sock");
        Process p = peer(socket, "future-write");
        try (ImportedTables t = EngramClient.connect(socket, Expectation.any(),
                ClientOptions.defaults().withFutureWriteSealAccepted(true))) {
            assertEquals(1, t.tables().size());
        } finally {
            stop(p);
        }
    }

    /**
     * A restart under way: the daemon answers STOPPING and goes, its socket file with it, and 300 ms later a successor
     * listens on the path. Within the wait the client asks again on a new connection, trying the absent socket
     * meanwhile; without a wait it says STOPPING.
     */
    @Test
    void asksASuccessorAgainAfterStoppingWithinTheWaitAndSaysStoppingWithout(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("peer.sock");
        int fds = io.engramhost.os.ProcessProbe.countOpenFds();
        Process p = peer(socket, "stopping-restart");
        try (ImportedTables t = EngramClient.connect(socket, Expectation.any(),
                ClientOptions.defaults().withNotReadyWait(5000))) {
            assertEquals(2, t.tables().size());
        } finally {
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), peerLog(socket));
            stop(p);
        }
        assertTrue(peerLog(socket).contains("first daemon version 2, 1 IMPORT(s); successor version 2, 1 IMPORT(s)"),
                peerLog(socket));
        assertEquals(fds, io.engramhost.os.ProcessProbe.countOpenFds(), "no fd left open");

        Files.delete(socket.resolveSibling("peer.log"));
        Files.delete(socket); // the successor's, left as a daemon killed leaves it
        p = peer(socket, "stopping-restart");
        try {
            EngramClientException e = assertThrows(EngramClientException.class,
                    () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()).close());
            assertTrue(e.getMessage().startsWith("STOPPING: daemon is stopping"), e.getMessage());
        } finally {
            stop(p);
        }
    }

    /** A MANIFEST continued by a one-byte PART every 2 s: each part in time, but the answer is bounded as a whole. */
    @Test
    void givesUpOnAnAnswerWhosePartsTrickle(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("peer.sock");
        Process p = peer(socket, "slow-parts");
        long t0 = System.nanoTime();
        try {
            RuntimeException e = assertThrows(RuntimeException.class,
                    () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()).close());
            double s = (System.nanoTime() - t0) / 1e9;
            assertTrue(s < 13, "gave up after " + s + " s, not about 10: " + e.getMessage());
            assertTrue(e.getMessage().contains("did not answer within 10000 ms"), e.getMessage());
        } finally {
            stop(p);
        }
    }

    /** Fewer fds than the header announces: refused at once, not after the answer's deadline. */
    @Test
    void refusesFewerFdsThanAnnouncedAtOnce(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("peer.sock");
        Process p = peer(socket, "fewer-fds");
        long t0 = System.nanoTime();
        try {
            RuntimeException e = assertThrows(RuntimeException.class,
                    () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()).close());
            double s = (System.nanoTime() - t0) / 1e9;
            assertTrue(s < 3, "took " + s + " s: " + e.getMessage());
            assertTrue(e.getMessage().contains("announces 2 fds, but 1 came with its header"), e.getMessage());
        } finally {
            stop(p);
        }
    }
}
