package io.engramhost.bench;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.memfd.PageKind;
import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.Expectation;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * A client's import of {@code tables} tables from an in-process daemon over its Unix socket: connect,
 * HELLO/WELCOME, IMPORT with a SHA-256 expectation (checked by the daemon), MANIFEST with one memfd fd per
 * table, read-only mmap of each. Baseline: the same fds sent over a socketpair with no protocol.
 * Each shot is a batch of {@link #BATCH} calls (time per call reported); imports are closed between shots.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 20, batchSize = HandshakeBench.BATCH)
@Measurement(iterations = 10, batchSize = HandshakeBench.BATCH)
@Fork(2)
public class HandshakeBench {
    /** Calls timed together as one shot; JMH reports the time per call. */
    static final int BATCH = 50;

    /** Tables served, one memfd each. */
    @Param({"1", "16", "64", "256"})
    public int tables;

    /** Rows of 264 bytes per table (the mapping cost does not depend on it: nothing is prefaulted). */
    @Param({"256"})
    public long rows;

    private InProcessDaemon daemon;
    private Expectation expectation;
    private ClientOptions options;
    private List<Fd> fds;
    private UnixConnection[] pair;
    private long regionBytes;

    @Setup(Level.Trial)
    public void setUp() {
        QuietDaemonLog.install();
        Posix.raiseNoFileLimit();
        daemon = InProcessDaemon.start(() -> BenchTables.build(tables, rows, 264, PageKind.SMALL));
        expectation = Expectation.sha256(BenchTables.fingerprintHex(tables, rows, 264));
        options = ClientOptions.defaults().withName("engram-bench");
        pair = UnixConnection.pair("bench");
        fds = new ArrayList<>();
        regionBytes = PageKind.SMALL.roundUp(rows * 264);
        try (ImportedTables check = EngramClient.connect(daemon.socket(), expectation, options)) {
            if (check.tables().size() != tables) {
                throw new IllegalStateException("imported " + check.tables().size() + " tables, expected " + tables);
            }
        }
        for (int i = 0; i < tables; i++) {
            Fd fd = Posix.memfdCreate("engram.bench.baseline." + i, 0);
            fds.add(fd);
            Posix.ftruncate(fd, regionBytes);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        fds.forEach(Fd::close);
        pair[0].close();
        pair[1].close();
        daemon.close();
    }

    /**
     * The imports of one iteration (a batch of {@link #BATCH} connects), closed together after it, in
     * parallel and outside the timing: a close waits for the client's daemon-watch thread (up to its
     * 200 ms poll), and closing during the batch would compete with the connects being timed.
     */
    @State(Scope.Thread)
    public static class Lease {
        private final ExecutorService closer = Executors.newFixedThreadPool(BATCH, r -> {
            Thread t = new Thread(r, "bench-closer");
            t.setDaemon(true);
            return t;
        });
        final List<ImportedTables> imported = new ArrayList<>();

        @TearDown(Level.Iteration)
        public void closeAll() throws InterruptedException, ExecutionException {
            List<Future<?>> closing = new ArrayList<>();
            for (ImportedTables t : imported) {
                closing.add(closer.submit(t::close));
            }
            imported.clear();
            for (Future<?> f : closing) {
                f.get();
            }
        }

        @TearDown(Level.Trial)
        public void stop() throws InterruptedException, ExecutionException {
            closeAll();
            closer.shutdownNow();
        }
    }

    /** Ours, without the close (measured on its own below): what a restarting engine waits for. */
    @Benchmark
    public int clientConnect(Lease lease) {
        ImportedTables t = EngramClient.connect(daemon.socket(), expectation, options);
        lease.imported.add(t);
        return t.tables().size();
    }

    /** Ours, connect then close (BYE, unmap, lease end): one per shot, as a close takes up to 200 ms. */
    @Benchmark
    @Warmup(iterations = 3, batchSize = 1)
    @Measurement(iterations = 10, batchSize = 1)
    public int clientConnectClose() {
        try (ImportedTables t = EngramClient.connect(daemon.socket(), expectation, options)) {
            return t.tables().size();
        }
    }

    /** Baseline: the same number of fds over a socketpair (sendmsg/recvmsg, SCM_RIGHTS), then closed. */
    @Benchmark
    public int socketpairFds() {
        pair[0].send(ByteBuffer.allocate(1), fds);
        FdMessages.Received r = pair[1].receive(16, tables, 10_000);
        int n = r.fds().size();
        r.fds().forEach(Fd::close);
        return n;
    }

    /** Baseline plus what the client does with the fds: map each read-only, close the fd, then unmap. */
    @Benchmark
    public int socketpairFdsMap() {
        pair[0].send(ByteBuffer.allocate(1), fds);
        FdMessages.Received r = pair[1].receive(16, tables, 10_000);
        List<Mapping> maps = new ArrayList<>(tables);
        for (Fd fd : r.fds()) {
            maps.add(ReadOnlyMapping.map(fd, regionBytes, false));
            fd.close();
        }
        maps.forEach(Mapping::close);
        return maps.size();
    }
}
