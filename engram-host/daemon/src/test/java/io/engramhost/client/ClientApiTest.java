package io.engramhost.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.daemon.Daemon;
import io.engramhost.daemon.DaemonContext;
import io.engramhost.daemon.DaemonLauncher;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Expectation;
import io.engramhost.store.CatalogFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import net.openhft.chronicle.bytes.Bytes;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The client library's contract, against a real daemon (in this JVM) serving a generated checkpoint. */
@Timeout(60)
class ClientApiTest {
    private static DaemonContext context(Path checkpoint, Path socket) {
        return new DaemonContext().checkpoints(List.of(checkpoint)).socket(socket).numa("none").threads(2)
                .limits(ConnectionLimits.defaults().withRequestTimeout(2000));
    }

    private static Daemon serve(Path dir, Path checkpoint) throws Exception {
        Daemon d = DaemonLauncher.start(context(checkpoint, dir.resolve("run/c.sock")), DaemonLauncher.Environment.none());
        d.awaitReady();
        return d;
    }

    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 14), 2000, 64, 5));
    }

    @Test
    void shouldGiveBoundsCheckedRowsAndAChronicleViewThatOutlivesTheHandleUntilClosed(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        try (Daemon d = serve(dir, ckpt)) {
            ImportedTables tables = EngramClient.connect(d.socket(), Expectation.any(), ClientOptions.defaults());
            TableView w = tables.table(CheckpointGenerator.weightName(1));
            assertEquals(2000, w.rows());
            assertEquals(64, w.rowBytes());
            byte[] row = new byte[64];
            w.readRow(1999, row, 0);
            byte[] gathered = new byte[128];
            w.readRows(new long[] {1999, 0}, gathered);
            assertArrayEquals(row, java.util.Arrays.copyOfRange(gathered, 0, 64));
            assertThrows(IndexOutOfBoundsException.class, () -> w.readRow(2000, row, 0));
            assertThrows(IndexOutOfBoundsException.class, () -> w.readRows(new long[] {-1}, gathered));
            assertThrows(IndexOutOfBoundsException.class, () -> w.copy(0, new byte[8], 4, 8));

            TableView.ChronicleView view = w.openBytes();
            Bytes<Void> b = view.bytes();
            assertEquals(w.bytes(), b.readRemaining());
            assertEquals(w.getLong(8 * 1999), b.readLong(8 * 1999));
            assertThrows(RuntimeException.class, () -> b.readLong(w.bytes()), "Chronicle checks its limit");
            tables.close();
            assertThrows(IllegalStateException.class, () -> w.getLong(0), "row access throws once closed");
            assertEquals(row[0], b.readByte(1999 * 64), "the open view keeps the memory mapped");
            view.close();
            assertThrows(IllegalStateException.class, view::bytes);
            assertThrows(IllegalStateException.class, w::openBytes);
        }
    }

    @Test
    void shouldServeManyClientsAtOnce(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        try (Daemon d = serve(dir, ckpt)) {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                List<Future<Long>> results = new ArrayList<>();
                for (int i = 0; i < 16; i++) {
                    Callable<Long> importOnce = () -> {
                        try (ImportedTables t = EngramClient.connect(d.socket(), Expectation.any(), ClientOptions.defaults())) {
                            TableView s = t.table(CheckpointGenerator.scaleName(14));
                            return s.computeDigest(1) == s.digest() ? s.digest() : -1L;
                        }
                    };
                    results.add(pool.submit(importOnce));
                }
                long first = results.get(0).get();
                for (Future<Long> f : results) {
                    assertEquals(first, f.get(), "every client read the same intact table");
                }
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void shouldFallBackToDiskOnlyWhenNoDaemonListens(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        String weight = CheckpointGenerator.weightName(14);
        long expected;
        try (Daemon d = serve(dir, ckpt); ImportedTables t = EngramClient.connect(d.socket(), Expectation.any(),
                ClientOptions.defaults())) {
            expected = t.table(weight).digest();
        }
        Path absent = dir.resolve("none.sock");
        try (ImportedTables t = EngramClient.connectOrLoad(absent, Expectation.any(), ClientOptions.defaults(),
                List.of(ckpt), List.of(), 2)) {
            assertEquals(ImportedTables.Source.DISK, t.source());
            assertEquals(expected, t.table(weight).digest());
            assertEquals(expected, t.table(weight).computeDigest(2));
        }
        Path stale = dir.resolve("stale.sock");
        try (var listener = io.engramhost.os.UnixListener.bind(stale, 1)) {
            // a socket file nobody listens on after close, as a killed daemon leaves: connect is refused
            // (ECONNREFUSED), so no daemon serves and the client loads from disk, saying so (docs/protocol.md)
        }
        assertTrue(Files.exists(stale));
        List<String> notices = new java.util.ArrayList<>();
        try (ImportedTables t = EngramClient.connectOrLoad(stale, Expectation.any(),
                ClientOptions.defaults().withNotices(notices::add), List.of(ckpt), List.of(), 2)) {
            assertEquals(ImportedTables.Source.DISK, t.source());
            assertEquals(expected, t.table(weight).digest());
        }
        assertEquals(List.of("engram-host: no daemon listens on " + stale + " (connection refused): loading " + ckpt
                + " from disk"), notices);
    }

    @Test
    void shouldReportLoadingStatusAndNotReady(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        loadWhileClientsWait(dir.resolve("warm-up"), ckpt); // the JVM opens what it keeps open (jars, epoll) here
        int fds = io.engramhost.os.ProcessProbe.countOpenFds();
        loadWhileClientsWait(dir.resolve("measured"), ckpt);
        assertEquals(fds, io.engramhost.os.ProcessProbe.countOpenFds(), "a daemon and its clients leave no fd behind");
    }

    private static void loadWhileClientsWait(Path dir, Path ckpt) throws Exception {
        CountDownLatch held = new CountDownLatch(1);
        DaemonHooks holdTheLoad = new DaemonHooks() {
            @Override
            public void reached(Point point) {
                if (point == Point.LOAD_BEFORE_READ) {
                    try {
                        held.await();
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                }
            }
        };
        try (Daemon d = DaemonLauncher.start(context(ckpt, dir.resolve("run/l.sock")).hooks(holdTheLoad),
                DaemonLauncher.Environment.none())) {
            String status = EngramClient.status(d.socket(), ClientOptions.defaults());
            assertTrue(status.contains("\"state\":\"loading\"") && status.contains("\"progress\""), status);
            EngramClientException e = assertThrows(EngramClientException.class,
                    () -> EngramClient.connect(d.socket(), Expectation.any(), ClientOptions.defaults()));
            assertEquals(ErrorCode.NOT_READY, e.code());
            Thread opener = new Thread(() -> {
                try {
                    Thread.sleep(300);
                    held.countDown();
                } catch (InterruptedException ex) {
                    throw new IllegalStateException(ex);
                }
            });
            opener.start();
            try (ImportedTables t = EngramClient.connect(d.socket(), Expectation.any(),
                    ClientOptions.defaults().withNotReadyWait(10_000))) {
                assertEquals(4, t.tables().size(), "waited through loading");
            }
            opener.join();
        }
    }
}
