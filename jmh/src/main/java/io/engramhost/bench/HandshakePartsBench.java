package io.engramhost.bench;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.FdMessages;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Diagnostics for {@link HandshakeBench}: what the pieces of one import cost on their own, so a missed
 * target can be traced to a step. No comparison is made from these.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class HandshakePartsBench {
    private InProcessDaemon daemon;
    private UnixConnection[] pair;
    private UnixConnection[] echoPair;
    private Thread echo;
    private ClientOptions options;

    @Setup(Level.Trial)
    public void setUp() {
        QuietDaemonLog.install();
        daemon = InProcessDaemon.start(() -> BenchTables.build(1, 16, 264, PageKind.SMALL));
        pair = UnixConnection.pair("bench");
        echoPair = UnixConnection.pair("echo");
        echo = new Thread(this::echoLoop, "bench-echo");
        echo.setDaemon(true);
        echo.start();
        options = ClientOptions.defaults().withName("engram-bench");
    }

    /** Sends every message straight back, until the other end closes. */
    private void echoLoop() {
        try {
            while (true) {
                FdMessages.Received r = echoPair[1].receive(64, 0, -1);
                echoPair[1].send(r.payload(), List.of());
            }
        } catch (RuntimeException e) {
            // the benchmark closed its end: done
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        pair[0].close();
        pair[1].close();
        echoPair[0].close();
        echo.join(5000);
        echoPair[1].close();
        daemon.close();
    }

    /** connect(2) to the daemon's socket and close: the daemon's session only sees EOF. */
    @Benchmark
    public boolean unixConnectClose() {
        try (UnixConnection c = UnixConnection.connect(daemon.socket())) {
            return c.isOpen();
        }
    }

    /** A whole request: connect, HELLO/WELCOME, STATUS/STATUS_REPLY, close (two round trips to a daemon thread). */
    @Benchmark
    public String statusRequest() {
        return EngramClient.status(daemon.socket(), options);
    }

    /** One 8-byte message with no fds through FdMessages, sent and received by this thread. */
    @Benchmark
    public int messageNoFds() {
        pair[0].send(ByteBuffer.allocate(8), List.of());
        FdMessages.Received r = pair[1].receive(8, 0, 10_000);
        return r.payload().remaining();
    }

    /** One 8-byte message to a thread blocked in receive and back: the floor of any request/answer. */
    @Benchmark
    public int roundTripToThread() {
        echoPair[0].send(ByteBuffer.allocate(8), List.of());
        return echoPair[0].receive(8, 0, 10_000).payload().remaining();
    }

    /** Starting and joining a thread: the client starts one (its daemon watch) per import. */
    @Benchmark
    public Thread threadStartJoin() throws InterruptedException {
        Thread t = new Thread(() -> { });
        t.start();
        t.join();
        return t;
    }

    /** pidfd_open and close: the client's watch on the daemon's pid. */
    @Benchmark
    public int pidfdOpenClose() {
        try (var fd = Posix.pidfdOpen(Posix.getpid())) {
            return fd.get();
        }
    }
}
