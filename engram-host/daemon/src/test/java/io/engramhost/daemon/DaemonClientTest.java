package io.engramhost.daemon;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.DaemonAbsentException;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.daemon.launch.DaemonLock;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Posix;
import io.engramhost.os.internal.LibCHolder;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.RegionKind;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.store.Catalog;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Daemon and client in one JVM over a real socket and real memfds (separate processes: see the CLI tests). */
@Timeout(60)
class DaemonClientTest {
    private static final jnr.ffi.Pointer MEM = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);

    /** A ready daemon on {@code socket} serving {@link #catalog}. */
    private static Daemon ready(Path socket) throws Exception {
        return TestDaemons.ready(TestDaemons.context(socket, p -> catalog(), Set.of()));
    }

    /** One memfd holding two tables: rows of 8 bytes with value row*3, and an empty table. */
    static Catalog catalog() {
        MemfdRegion region = MemfdRegion.create("engram.test", 4096, PageKind.SMALL, null);
        for (int i = 0; i < 16; i++) {
            MEM.putLong(region.writable().address() + 8L * i, i * 3L);
        }
        region.seal();
        Manifest manifest = new Manifest(sha256OfNothing(), new byte[0],
                List.of(new Manifest.Region(RegionKind.MEMFD, 4096, 0, -1)),
                List.of(new Manifest.Table("t.weight", "I64", new long[] {16}, 128, 0, 0, 7, RegionKind.MEMFD, 0, -1),
                        new Manifest.Table("t.empty", "F32", new long[] {0, 4}, 0, -1, 0, 0, RegionKind.MEMFD, -1, -1)));
        return new Catalog(manifest, List.of(region.fd()), "00".repeat(32),
                e -> e.kind() == Expectation.Kind.ANY ? List.of() : List.of("expected something else"), "memfd", region);
    }

    @Test
    void shouldServeTablesAndEndLeasesOnClose(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/d.sock");
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        TestDaemons.Held held = new TestDaemons.Held(DaemonClientTest::catalog);
        try (Daemon daemon = TestDaemons.start(TestDaemons.context(socket, held, Set.of()))) {
            assertEquals("rw-------", java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(socket)));
            EngramClientException notReady = assertThrows(EngramClientException.class,
                    () -> EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults()));
            assertEquals(ErrorCode.NOT_READY, notReady.code());
            assertFalse(Files.exists(SocketPaths.readyFile(socket)), "no ready file while loading");
            held.open();
            daemon.awaitReady();
            assertEquals(Integer.toString(daemon.pid()), ReadyFile.read(SocketPaths.readyFile(socket)).get("pid"));

            CountDownLatch gone = new CountDownLatch(1);
            AtomicReference<String> reason = new AtomicReference<>();
            ImportedTables tables = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults());
            tables.onDaemonGone(r -> {
                reason.set(r);
                gone.countDown();
            });
            TableView t = tables.table("t.weight");
            assertEquals(15 * 3L, t.getLong(15 * 8));
            assertEquals(16, t.rows());
            assertThrows(IndexOutOfBoundsException.class, () -> t.getLong(128));
            assertEquals(0, tables.table("t.empty").bytes());
            assertTrue(EngramClient.status(socket, ClientOptions.defaults()).contains("\"leases\":[{\"id\":1"));

            EngramClientException mismatch = assertThrows(EngramClientException.class,
                    () -> EngramClient.connect(socket, Expectation.sha256("ab".repeat(32)), ClientOptions.defaults()));
            assertEquals(ErrorCode.FINGERPRINT_MISMATCH, mismatch.code());
            assertEquals(List.of("expected something else"), mismatch.details());

            EngramClient.stop(socket, ClientOptions.defaults());
            daemon.awaitStop();
            daemon.close();
            assertTrue(gone.await(5, TimeUnit.SECONDS), "callback fired");
            assertEquals("the daemon closed the lease connection", reason.get());
            assertEquals(15 * 3L, t.getLong(15 * 8), "mappings outlive the daemon");
            tables.close();
            assertThrows(IllegalStateException.class, () -> t.getLong(0));
        }
        assertFalse(Files.exists(socket));
        assertFalse(Files.exists(SocketPaths.readyFile(socket)));
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "daemon and client left no fd open");
    }

    @Test
    void shouldTellTheDaemonIsGoneWithoutACallbackThread(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("w.sock");
        ImportedTables tables;
        try (Daemon daemon = ready(socket)) {
            tables = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults());
            assertEquals(null, tables.daemonGoneReason(), "the daemon is there");
        }
        try (tables) {
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (tables.daemonGoneReason() == null && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertEquals("the daemon closed the lease connection", tables.daemonGoneReason());
            assertEquals(3L, tables.table("t.weight").getLong(8), "still readable");
        }
    }

    @Test
    void shouldRefuseASecondDaemonNamingThePid(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("d.sock");
        try (Daemon daemon = TestDaemons.start(TestDaemons.context(socket, p -> catalog(), Set.of()))) {
            DaemonLock.AlreadyRunningException e = assertThrows(DaemonLock.AlreadyRunningException.class,
                    () -> TestDaemons.start(TestDaemons.context(socket, p -> catalog(), Set.of())));
            assertEquals("engram-host is already running (pid=" + daemon.pid() + ") on " + socket + ": stop it"
                    + " (engram-host stop --socket " + socket + "), take it over (serve --takeover, same flags), or"
                    + " serve another --instance or --socket", e.getMessage());
        }
    }

    /**
     * Without CUDA, an import with a GPU view fails naming the cause, whether {@link EngramClient#prepareCudaDriver}
     * and {@link EngramClient#prepare} started its GPU preparation early or the connect started it; and the early
     * one serves one import only.
     */
    @Test
    void shouldFailAGpuImportWithoutCudaTheSameWithOrWithoutAnEarlyPreparation(@TempDir Path dir) throws Exception {
        org.junit.jupiter.api.Assumptions.assumeFalse(io.engramhost.cuda.Cuda.available(), "this machine has CUDA");
        Path socket = dir.resolve("g.sock");
        ClientOptions gpu = ClientOptions.defaults().withGpu(0, false);
        try (Daemon daemon = ready(socket)) {
            String expected = "CUDA is not available: " + io.engramhost.cuda.Cuda.unavailabilityCause()
                    + "; for CPU views only, connect without a GPU view (no ClientOptions.withGpu; engram-host import"
                    + " without --gpu)";
            EngramClient.prepareCudaDriver();
            EngramClient.prepare(gpu);
            for (int i = 0; i < 2; i++) { // the first takes the early preparation, the second starts its own
                RuntimeException e = assertThrows(RuntimeException.class,
                        () -> EngramClient.connect(socket, Expectation.any(), gpu));
                assertEquals(expected, e.getMessage());
            }
            EngramClient.prepare(gpu);
            EngramClient.awaitGpuPreparation(5000); // one no connect takes: waited for, and quiet
            try (ImportedTables cpu = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(15 * 3L, cpu.table("t.weight").getLong(15 * 8), "an import without a GPU view still works");
            }
        }
    }

    @Test
    void shouldReportAbsentSocket(@TempDir Path dir) {
        assertThrows(DaemonAbsentException.class,
                () -> EngramClient.connect(dir.resolve("none.sock"), Expectation.any(), ClientOptions.defaults()));
    }

    @Test
    void shouldSurviveGarbageAndSilence(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("d.sock");
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        try (Daemon daemon = ready(socket)) {
            try (var c = io.engramhost.os.UnixConnection.connect(socket)) {
                c.send(java.nio.ByteBuffer.wrap("garbage!".getBytes()), List.of());
            }
            try (var c = io.engramhost.os.UnixConnection.connect(socket)) {
                // past the 1 s HELLO deadline: the daemon says why, then hangs up
                var m = c.receive(1 << 16, 0, 3000);
                var error = io.engramhost.protocol.ErrorReply.decode(io.engramhost.protocol.FrameReader.of(m.payload()));
                assertEquals(io.engramhost.protocol.ErrorCode.TIMED_OUT, error.code());
                assertTrue(error.message().contains("HELLO within 1000 ms"), error.message());
                assertTrue(c.awaitReadable(2000), "daemon hung up on a silent client");
            }
            try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(3L, t.table("t.weight").getLong(8));
            }
            Map<String, String> ready = ReadyFile.read(SocketPaths.readyFile(socket));
            assertEquals("memfd", ready.get("backend"));
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "no fd left behind");
    }

    /** The SHA-256 of an empty fingerprint: a MANIFEST's fingerprint_sha256 must be that of the fingerprint it carries. */
    private static byte[] sha256OfNothing() {
        try {
            return java.security.MessageDigest.getInstance("SHA-256").digest(new byte[0]);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
