package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.DaemonAbsentException;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.ImportedTables;
import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.SocketPaths;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * docs/protocol.md, "A dead daemon": a daemon killed with SIGKILL leaves its socket, lock and ready
 * file; connect is then refused (ECONNREFUSED) and a client with a fallback loads from disk, saying so
 * in one line, without touching the lock. Whatever a live daemon answers is never a reason to fall back.
 */
@Timeout(300)
class DeadDaemonFallbackTest {

    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 1000, 64, 3));
    }

    /** A daemon started and killed with SIGKILL: its socket, lock and ready file stay behind. */
    private static Path killedDaemon(Path dir, Path ckpt) throws Exception {
        Path socket = dir.resolve("run/k.sock");
        DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString()).awaitReady();
        d.process.destroyForcibly().waitFor();
        assertTrue(Files.exists(socket) && Files.exists(SocketPaths.readyFile(socket))
                && Files.exists(SocketPaths.lockFile(socket)), "a killed daemon leaves its files");
        return socket;
    }

    private static void assertSha256sOfCheckpoint(Path ckpt, String importJson) throws Exception {
        Map<String, Map<String, Object>> tables = CliIntegrationTest.importedTables(importJson);
        for (TensorInfo t : Checkpoint.open(List.of(ckpt)).tensors()) {
            assertEquals(DemoCommand.sha256(t), tables.get(t.name()).get("sha256"), t.name());
        }
    }

    @Test
    void shouldLoadFromDiskWhenAKilledDaemonLeftItsSocket(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = killedDaemon(dir, ckpt);
        Path lock = SocketPaths.lockFile(socket);
        byte[] lockBefore = Files.readAllBytes(lock);
        // The lock is held here while the client runs: a client that took it (or waited for it) would fail or hang.
        try (Fd held = Posix.open(lock, Posix.O_RDWR | Posix.O_CLOEXEC, 0)) {
            assertTrue(Posix.flock(held, Posix.LOCK_EX | Posix.LOCK_NB), "the dead daemon's lock is free");
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--fallback-checkpoint", ckpt.toString(),
                    "--json", "--digest", "sha256");
            assertEquals(0, r.exit(), r.err());
            assertEquals("engram-host: no daemon listens on " + socket + " (connection refused): loading " + ckpt
                    + " from disk", r.err().strip(), "one line says why");
            assertTrue(r.out().contains("\"source\":\"disk\""), r.out());
            assertSha256sOfCheckpoint(ckpt, r.out());
        }
        assertTrue(Files.exists(socket), "the client removes nothing: the next daemon cleans up");
        assertEquals(new String(lockBefore), Files.readString(lock), "nor writes the lock file");

        CliRun without = CliRun.of("import", "--socket", socket.toString());
        assertEquals(1, without.exit());
        assertEquals("engram-host import: no engram-host daemon listens on " + socket + " (connection refused): the"
                + " socket file is left from a daemon that is gone; the next daemon on this path removes it",
                without.err().strip(), "without a fallback it is an error, with the same cause");
        CliRun status = CliRun.of("status", "--socket", socket.toString());
        assertEquals(1, status.exit());
        assertTrue(status.err().contains("(connection refused)"), status.err());
    }

    @Test
    void shouldLoadFromDiskWhenNoSocketExists(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        for (Path socket : List.of(dir.resolve("run/none.sock"), dir.resolve("no-such-dir/none.sock"))) {
            CliRun r = CliRun.of("import", "--socket", socket.toString(), "--fallback-checkpoint", ckpt.toString(),
                    "--json", "--digest", "sha256");
            assertEquals(0, r.exit(), r.err());
            assertEquals("engram-host: no daemon listens on " + socket + " (no such socket): loading " + ckpt
                    + " from disk", r.err().strip());
            assertSha256sOfCheckpoint(ckpt, r.out());
        }
    }

    /**
     * The wait (withNotReadyWait) covers a daemon still starting: a connect made before the daemon binds its socket
     * imports once it does; a connect with a wait and no daemon ends in DaemonAbsentException at the wait's end; and
     * connectOrLoad does not wait at all: no daemon, the disk at once.
     */
    @Test
    void shouldWaitForADaemonStillStartingButNeverDelayTheFallback(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("later/l.sock");
        ClientOptions waiting = ClientOptions.defaults().withNotReadyWait(60_000).withNotices(n -> { });
        try (io.engramhost.client.PendingTables pending = EngramClient.connectInBackground(socket, Expectation.any(),
                waiting)) {
            Thread.sleep(300);
            assertFalse(pending.isReady(), "still waiting for a socket");
            try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("l.log"), "--checkpoint", ckpt.toString())) {
                ImportedTables t = pending.await();
                assertEquals(ImportedTables.Source.DAEMON, t.source());
                assertEquals(2, t.tables().size());
            }
        }
        long t0 = System.nanoTime();
        assertThrows(DaemonAbsentException.class, () -> EngramClient.connect(dir.resolve("none.sock"), Expectation.any(),
                ClientOptions.defaults().withNotReadyWait(500)));
        assertTrue(System.nanoTime() - t0 >= 500_000_000L, "asked again until the wait ended");
        t0 = System.nanoTime();
        try (ImportedTables t = EngramClient.connectOrLoad(dir.resolve("none.sock"), Expectation.any(), waiting,
                List.of(ckpt), List.of(), 2)) {
            assertEquals(ImportedTables.Source.DISK, t.source());
        }
        assertTrue(System.nanoTime() - t0 < 30_000_000_000L, "no daemon: the disk at once, not a 60 s wait");
    }

    @Test
    void shouldFallBackThroughTheApiAfterSigkill(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = killedDaemon(dir, ckpt);
        DaemonAbsentException absent = assertThrows(DaemonAbsentException.class,
                () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()));
        assertEquals(Errno.ECONNREFUSED, absent.errno(), "the errno comes from connect itself");
        assertEquals("connection refused", absent.reason());
        List<String> notices = new ArrayList<>();
        try (ImportedTables t = EngramClient.connectOrLoad(socket, Expectation.any(),
                ClientOptions.defaults().withNotices(notices::add), List.of(ckpt), List.of(), 2)) {
            assertEquals(ImportedTables.Source.DISK, t.source());
            for (TensorInfo info : Checkpoint.open(List.of(ckpt)).tensors()) {
                assertEquals(DemoCommand.sha256(info), HexFormat.of().formatHex(t.table(info.name()).sha256()));
            }
        }
        assertEquals(List.of("engram-host: no daemon listens on " + socket + " (connection refused): loading " + ckpt
                + " from disk"), notices);
    }

    @Test
    void shouldNotFallBackWhenALiveDaemonRefuses(@TempDir Path dir) throws Exception {
        Path served = checkpoint(dir);
        Path other = CheckpointGenerator.writeSharded(dir.resolve("other"), new CheckpointGenerator.Spec(List.of(1), 2000, 64, 3));
        Path socket = dir.resolve("run/live.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", served.toString(),
                "--max-connections", "2").awaitReady()) {
            CliRun mismatch = CliRun.of("import", "--socket", socket.toString(), "--expect-checkpoint", other.toString(),
                    "--fallback-checkpoint", other.toString());
            assertEquals(1, mismatch.exit());
            assertTrue(mismatch.err().startsWith("engram-host import: FINGERPRINT_MISMATCH: "), mismatch.err());
            assertFalse(mismatch.err().contains("from disk"), mismatch.err());
            List<String> notices = new ArrayList<>();
            EngramClientException api = assertThrows(EngramClientException.class, () -> EngramClient.connectOrLoad(
                    socket, Expectation.sha256("0".repeat(64)), ClientOptions.defaults().withNotices(notices::add),
                    List.of(served), List.of(), 2));
            assertEquals(ErrorCode.FINGERPRINT_MISMATCH, api.code());
            assertEquals(List.of(), notices, "nothing loaded from disk");

            // Two leases fill --max-connections 2; leases are never evicted, so the next client is told BUSY.
            try (ImportedTables a = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults());
                    ImportedTables b = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                CliRun busy = CliRun.of("import", "--socket", socket.toString(), "--fallback-checkpoint", served.toString());
                assertEquals(1, busy.exit());
                assertTrue(busy.err().startsWith("engram-host import: BUSY: ") && busy.err().contains("--max-connections"),
                        "the daemon's message names the limit: " + busy.err());
                assertFalse(busy.err().contains("from disk"), busy.err());
                EngramClientException apiBusy = assertThrows(EngramClientException.class, () -> EngramClient.connectOrLoad(
                        socket, Expectation.any(), ClientOptions.defaults().withNotices(notices::add), List.of(served),
                        List.of(), 2));
                assertEquals(ErrorCode.BUSY, apiBusy.code());
                assertEquals(List.of(), notices);
            }
        }
    }

    @Test
    void shouldNotFallBackWhenALiveServerIsSilentOrUntrusted(@TempDir Path tmp) throws Exception {
        Path ckpt = checkpoint(tmp);
        Path dir = Impostor.sharedDir("engram-fallback-");
        try (Impostor silent = Impostor.start(dir, "silent", "silent", false)) {
            List<String> notices = new ArrayList<>();
            ClientOptions quick = new ClientOptions(500, 0, false, "fallback-test", -1, false, true, Set.of(),
                    notices::add, false);
            long t0 = System.nanoTime();
            EngramClientException e = assertThrows(EngramClientException.class, () -> EngramClient.connectOrLoad(
                    silent.socket, Expectation.any(), quick, List.of(ckpt), List.of(), 2));
            assertTrue(e.getMessage().contains("did not answer within 500 ms"), e.getMessage());
            assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "bounded by the request timeout");
            assertEquals(List.of(), notices, "a timeout is no reason to load from disk");
            if (Impostor.canRunAsNobody()) {
                try (Impostor squatter = Impostor.start(dir, "squatter", "good", true)) {
                    EngramClientException refused = assertThrows(EngramClientException.class,
                            () -> EngramClient.connectOrLoad(squatter.socket, Expectation.any(),
                                    ClientOptions.defaults().withNotices(notices::add), List.of(ckpt), List.of(), 2));
                    assertTrue(refused.getMessage().contains("is 65534, and this client trusts only"), refused.getMessage());
                    assertEquals(List.of(), notices, "an untrusted daemon is no reason to load from disk");
                    try (ImportedTables t = EngramClient.connectOrLoad(squatter.socket, Expectation.any(),
                            ClientOptions.defaults().withDaemonUids(List.of(Impostor.NOBODY)), List.of(ckpt), List.of(), 2)) {
                        assertEquals(ImportedTables.Source.DAEMON, t.source(), "a trusted daemon serves");
                    }
                }
            }
        } finally {
            Impostor.deleteTree(dir);
        }
    }
}
