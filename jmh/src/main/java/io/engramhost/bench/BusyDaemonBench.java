package io.engramhost.bench;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.MessageType;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
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
 * An engine's import (connect, HELLO, IMPORT, map, BYE) while other peers of its uid hold 1,000
 * connections open: idle, trickling half a header (slowloris), or polling STATUS as fast as answers
 * come. {@code none} is the baseline, in the same run. The daemon runs in this JVM with its default
 * limits, but HELLO and idle deadlines long enough that the peers stay for the whole trial.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 10)
@Measurement(iterations = 20)
@Fork(1)
public class BusyDaemonBench {
    static final int PEERS = 1000;

    /** What the other peers do. */
    @Param({"none", "idle", "slowloris", "polling"})
    public String load;

    private InProcessDaemon daemon;
    private final List<SocketChannel> peers = new ArrayList<>();
    private Thread poller;
    private volatile boolean polling;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        QuietDaemonLog.install();
        Posix.raiseNoFileLimit();
        ConnectionLimits d = ConnectionLimits.defaults();
        ConnectionLimits limits = new ConnectionLimits(d.maxConnections(), 2 * PEERS, 3_600_000, d.requestTimeoutMillis(),
                3_600_000, d.requestMemory(), d.workers());
        daemon = InProcessDaemon.start(() -> BenchTables.build(4, 4096, 264, PageKind.SMALL), limits);
        if (load.equals("none")) {
            return;
        }
        ByteBuffer hello = message(new Hello(1, 2, 1, "bench-peer").encode());
        for (int i = 0; i < PEERS; i++) {
            SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            ch.connect(UnixDomainSocketAddress.of(daemon.socket()));
            peers.add(ch);
            switch (load) {
                case "idle" -> { }
                case "slowloris" -> write(ch, hello.duplicate().limit(5));
                case "polling" -> {
                    write(ch, hello.duplicate());
                    readMessage(ch);
                }
                default -> throw new IllegalArgumentException("load: '" + load + "'");
            }
        }
        if (load.equals("polling")) {
            polling = true;
            ByteBuffer status = message(Frames.empty(MessageType.STATUS, 2));
            poller = new Thread(() -> {
                try {
                    while (polling) {
                        for (SocketChannel ch : peers) {
                            write(ch, status.duplicate());
                            readMessage(ch);
                        }
                    }
                } catch (IOException e) {
                    if (polling) {
                        throw new UncheckedIOException("a STATUS poller lost its connection", e);
                    }
                }
            }, "bench-status-pollers");
            poller.setDaemon(true);
            poller.start();
        }
    }

    private static ByteBuffer message(ByteBuffer frame) {
        ByteBuffer m = ByteBuffer.allocate(8 + frame.remaining()).order(ByteOrder.LITTLE_ENDIAN);
        return m.putInt(frame.remaining()).putInt(0).put(frame.duplicate()).flip();
    }

    private static void write(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            ch.write(b);
        }
    }

    private static void readMessage(SocketChannel ch) throws IOException {
        ByteBuffer h = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
        readFully(ch, h);
        readFully(ch, ByteBuffer.allocate(h.getInt(0)));
    }

    private static void readFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                throw new IOException("daemon closed a peer's connection");
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException, InterruptedException {
        polling = false;
        for (SocketChannel ch : peers) {
            ch.close();
        }
        if (poller != null) {
            poller.join(5000);
        }
        peers.clear();
        daemon.close();
    }

    /** One engine import, start to tables mapped, then released. */
    @Benchmark
    public int importTables() {
        try (ImportedTables t = EngramClient.connect(daemon.socket(), Expectation.any(), ClientOptions.defaults())) {
            return t.tables().size();
        }
    }
}
