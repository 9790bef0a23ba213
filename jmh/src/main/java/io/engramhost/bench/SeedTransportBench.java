package io.engramhost.bench;

import io.engramhost.bench.SeedTransportGrpc.Ask;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.os.Mapping;
import io.engramhost.os.RawMemory;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.HasByteBuffer;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollSocketChannel;
import io.grpc.stub.ServerCalls;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.DefaultFileRegion;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollIoHandler;
import io.netty.channel.epoll.EpollServerSocketChannel;
import io.netty.channel.socket.SocketChannel;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
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
 * Seeding's transport candidates on loopback, both ends in this JVM: the same {@code totalMiB} of a sealed memfd moved
 * as ranges of {@link #RANGE} bytes over {@code streams} TCP connections, each connection asking for its next range once
 * it has the last (as the seed requester does), stream {@code i} taking ranges {@code i, i + streams, ...}. One
 * operation is one whole transfer (SingleShotTime: GiB/s = totalMiB / 1024 / seconds per operation).
 * <ul>
 * <li>{@link #nettyEpollSendfile}: the seed exporter's path. A Netty server on the native epoll transport with the
 * exporter's two I/O threads and TCP_NODELAY writes each range as a {@link DefaultFileRegion} over a read-only open of
 * the memfd (sendfile(2), no copy in the JVM); the receiver is a blocking JDK {@code SocketChannel} per stream reading
 * straight into the destination.</li>
 * <li>{@link #grpc1MiB}, {@link #grpc4MiB}: gRPC-java (grpc-netty-shaded, its own Netty on its native epoll transport)
 * serving each range as a server-streaming call of 1 MiB or 4 MiB messages, one channel (one HTTP/2 connection) per
 * stream. No protobuf: a hand-written {@link MethodDescriptor} ({@link SeedTransportGrpc}) whose response marshaller
 * streams a message as a {@code KnownLength} {@code Drainable} view of a read-only mapping of the memfd (gRPC's framer
 * drains it into its own buffer: one copy through a 64 KiB scratch array that stays in cache) and, on the client, takes
 * the received stream with {@code Detachable} and copies its {@link HasByteBuffer} buffers straight into the
 * destination (one copy). Server and client use directExecutor() (no hand-off to an executor), a fixed 16 MiB HTTP/2
 * flow-control window (no BDP probing on loopback), the maximum inbound message size set to the message size; the
 * server sends only while the call is ready (its onReady handler), on the same two I/O threads as the Netty server;
 * the client is gRPC's default shared event loop group.</li>
 * </ul>
 * {@code dest}: {@code buffer}, every stream's bytes into one reused 8 MiB direct buffer (the transport alone, as
 * scripts/bench/tcp-rate.py's first receiver); {@code memfd}, into fresh pages of a new memfd mapping of the whole
 * transfer, made before each operation (its pages are first touched inside the operation, as a seeded region's are)
 * and checked against the source after it, untimed.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Fork(1)
@Warmup(iterations = 2)
@Measurement(iterations = 5)
public class SeedTransportBench {
    /** The seed protocol's range (docs/seeding.md). */
    static final int RANGE = 64 << 20;
    /** The reused receive buffer of each stream in {@code dest=buffer}. */
    static final int BUFFER = 8 << 20;
    /** gRPC's HTTP/2 flow-control window, each direction of each connection. */
    static final int GRPC_WINDOW = 16 << 20;
    /** The exporter's I/O threads (SeedExporter.IO_THREADS); the gRPC server gets as many. */
    static final int SERVER_THREADS = 2;

    @Param({"2", "16"})
    public int streams;

    @Param({"1024"})
    public int totalMiB;

    @Param({"buffer", "memfd"})
    public String dest;

    /** The range size; {@link #RANGE} but where a test makes it smaller. */
    int range = RANGE;

    private long total;
    private MemfdRegion source;
    private FileChannel sourceFile;
    private Mapping sourceView;
    private EventLoopGroup nettyLoop;
    private Channel nettyListener;
    private io.grpc.netty.shaded.io.netty.channel.EventLoopGroup grpcBoss;
    private io.grpc.netty.shaded.io.netty.channel.EventLoopGroup grpcWorkers;
    /** The channels' loops, the bench's own (of Netty's default size, as gRPC's shared group): closed in tearDown,
     *  not a second after it as the shared group is. */
    private io.grpc.netty.shaded.io.netty.channel.EventLoopGroup grpcClientLoops;
    private Server grpcServer;
    private final List<ManagedChannel> grpcChannels = new ArrayList<>();
    private ExecutorService clients;
    private ByteBuffer[] buffers;
    private MemfdRegion target;
    private final AtomicLong received = new AtomicLong();

    @Setup(Level.Trial)
    public void setUp() throws IOException, InterruptedException {
        if (!Epoll.isAvailable()) {
            throw new IllegalStateException("Netty's epoll transport is not available: " + Epoll.unavailabilityCause());
        }
        if (!io.grpc.netty.shaded.io.netty.channel.epoll.Epoll.isAvailable()) {
            throw new IllegalStateException("grpc-netty-shaded's epoll transport is not available: "
                    + io.grpc.netty.shaded.io.netty.channel.epoll.Epoll.unavailabilityCause());
        }
        if (!dest.equals("buffer") && !dest.equals("memfd")) {
            throw new IllegalArgumentException("dest: " + dest + " is not buffer or memfd");
        }
        total = (long) totalMiB << 20;
        try {
            source = MemfdRegion.create("seed-transport-source", total, PageKind.SMALL, null);
            NativeMemory.fillRandomParallel(source.writable().address(), total, 29);
            source.seal();
            sourceFile = FileChannel.open(Path.of("/proc/self/fd/" + source.fd().get()), StandardOpenOption.READ);
            sourceView = ReadOnlyMapping.map(source.fd(), total, true);
            startNetty();
            startGrpc();
            clients = Executors.newFixedThreadPool(streams, r -> {
                Thread t = new Thread(r, "seed-transport-client");
                t.setDaemon(true);
                return t;
            });
            buffers = new ByteBuffer[streams];
            for (int i = 0; i < streams; i++) {
                buffers[i] = ByteBuffer.allocateDirect(BUFFER);
            }
        } catch (IOException | InterruptedException | RuntimeException e) {
            tearDown();
            throw e;
        }
    }

    private void startNetty() throws InterruptedException {
        nettyLoop = new MultiThreadIoEventLoopGroup(SERVER_THREADS, EpollIoHandler.newFactory());
        nettyListener = new ServerBootstrap().group(nettyLoop).channel(EpollServerSocketChannel.class)
                .childOption(ChannelOption.TCP_NODELAY, true)
                .childHandler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    protected void initChannel(SocketChannel ch) {
                        ch.pipeline().addLast(new RangeServer());
                    }
                }).bind(InetAddress.getLoopbackAddress(), 0).sync().channel();
    }

    private void startGrpc() throws IOException {
        grpcBoss = new io.grpc.netty.shaded.io.netty.channel.MultiThreadIoEventLoopGroup(1,
                io.grpc.netty.shaded.io.netty.channel.epoll.EpollIoHandler.newFactory());
        grpcWorkers = new io.grpc.netty.shaded.io.netty.channel.MultiThreadIoEventLoopGroup(SERVER_THREADS,
                io.grpc.netty.shaded.io.netty.channel.epoll.EpollIoHandler.newFactory());
        ServerServiceDefinition service = ServerServiceDefinition.builder("engram.bench.Seed")
                .addMethod(SeedTransportGrpc.RANGE_METHOD, ServerCalls.asyncServerStreamingCall(
                        (ask, observer) -> SeedTransportGrpc.serveRange(sourceView.address(), ask, observer))).build();
        grpcServer = NettyServerBuilder.forAddress(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))
                .bossEventLoopGroup(grpcBoss).workerEventLoopGroup(grpcWorkers)
                .channelType(io.grpc.netty.shaded.io.netty.channel.epoll.EpollServerSocketChannel.class)
                .directExecutor().flowControlWindow(GRPC_WINDOW).maxInboundMessageSize(SeedTransportGrpc.ASK_BYTES)
                .addService(service).build().start();
        int port = grpcServer.getPort();
        grpcClientLoops = new io.grpc.netty.shaded.io.netty.channel.MultiThreadIoEventLoopGroup(0,
                io.grpc.netty.shaded.io.netty.channel.epoll.EpollIoHandler.newFactory());
        for (int i = 0; i < streams; i++) {
            grpcChannels.add(NettyChannelBuilder.forAddress(new InetSocketAddress(InetAddress.getLoopbackAddress(), port))
                    .eventLoopGroup(grpcClientLoops)
                    .channelType(EpollSocketChannel.class)
                    .usePlaintext().directExecutor().flowControlWindow(GRPC_WINDOW)
                    .maxInboundMessageSize(4 << 20).build());
        }
    }

    @Setup(Level.Invocation)
    public void makeTarget() {
        received.set(0);
        if (dest.equals("memfd")) {
            target = MemfdRegion.create("seed-transport-target", total, PageKind.SMALL, null);
        }
    }

    @TearDown(Level.Invocation)
    public void checkTarget() {
        try {
            if (received.get() != total) {
                throw new IllegalStateException("received " + received.get() + " bytes of " + total);
            }
            if (target != null) {
                checkSame(target.writable().address(), sourceView.address(), total);
            }
        } finally {
            if (target != null) {
                target.close();
                target = null;
            }
        }
    }

    private static void checkSame(long a, long b, long length) {
        for (long at = 0; at < length; at += 1 << 30) {
            int n = (int) Math.min(1 << 30, length - at);
            long m = RawMemory.buffer(a + at, n).mismatch(RawMemory.buffer(b + at, n));
            if (m >= 0) {
                throw new IllegalStateException("the received bytes differ from the source at " + (at + m));
            }
        }
    }

    private static void awaitTermination(ManagedChannel c) {
        try {
            if (!c.awaitTermination(5, TimeUnit.SECONDS)) {
                throw new IllegalStateException("a gRPC channel did not terminate within 5 s of shutdownNow");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while a gRPC channel terminated", e);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        for (ManagedChannel c : grpcChannels) {
            c.shutdownNow();
        }
        for (ManagedChannel c : grpcChannels) {
            awaitTermination(c);
        }
        grpcChannels.clear();
        if (grpcClientLoops != null) {
            grpcClientLoops.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly();
            grpcClientLoops = null;
        }
        if (grpcServer != null) {
            grpcServer.shutdownNow();
            grpcServer = null;
        }
        if (grpcWorkers != null) {
            grpcWorkers.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly();
            grpcBoss.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly();
            grpcWorkers = null;
        }
        if (nettyListener != null) {
            nettyListener.close().syncUninterruptibly();
            nettyListener = null;
        }
        if (nettyLoop != null) {
            nettyLoop.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly();
            nettyLoop = null;
        }
        if (clients != null) {
            clients.shutdownNow();
            clients = null;
        }
        buffers = null;
        try {
            if (sourceFile != null) {
                sourceFile.close();
                sourceFile = null;
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        if (sourceView != null) {
            sourceView.close();
            sourceView = null;
        }
        if (source != null) {
            source.close();
            source = null;
        }
    }

    @Benchmark
    public long nettyEpollSendfile() throws Exception {
        InetSocketAddress at = (InetSocketAddress) nettyListener.localAddress();
        return run(stream -> {
            try (java.nio.channels.SocketChannel ch = java.nio.channels.SocketChannel.open(at)) {
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                ByteBuffer ask = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);
                for (long off = (long) stream * range; off < total; off += (long) streams * range) {
                    int len = (int) Math.min(range, total - off);
                    ask.clear();
                    ask.putLong(off).putLong(len).flip();
                    while (ask.hasRemaining()) {
                        ch.write(ask);
                    }
                    Sink sink = sink(stream, off, len);
                    int got = 0;
                    while (got < len) {
                        ByteBuffer b = sink.next(len - got);
                        int n = ch.read(b);
                        if (n < 0) {
                            throw new IOException("the server closed the connection after " + got + " of " + len);
                        }
                        got += n;
                    }
                    received.addAndGet(len);
                }
            }
        });
    }

    @Benchmark
    public long grpc1MiB() throws Exception {
        return grpc(1 << 20);
    }

    @Benchmark
    public long grpc4MiB() throws Exception {
        return grpc(4 << 20);
    }

    private long grpc(int message) throws Exception {
        return run(stream -> {
            ManagedChannel channel = grpcChannels.get(stream);
            for (long off = (long) stream * range; off < total; off += (long) streams * range) {
                int len = (int) Math.min(range, total - off);
                Sink sink = sink(stream, off, len);
                CompletableFuture<Status> closed = new CompletableFuture<>();
                ClientCall<Ask, Object> call = channel.newCall(SeedTransportGrpc.RANGE_METHOD, CallOptions.DEFAULT);
                call.start(new ClientCall.Listener<>() {
                    @Override
                    public void onMessage(Object message) {
                        try (InputStream m = (InputStream) message) {
                            received.addAndGet(sink.take(m));
                        } catch (IOException | RuntimeException e) {
                            call.cancel("the receiver failed", e);
                        }
                    }

                    @Override
                    public void onClose(Status status, Metadata trailers) {
                        closed.complete(status);
                    }
                }, new Metadata());
                call.sendMessage(new Ask(off, len, message));
                call.halfClose();
                call.request(Integer.MAX_VALUE);
                Status s = closed.get();
                if (!s.isOk()) {
                    throw new IOException("range at " + off + ": " + s, s.asRuntimeException());
                }
            }
        });
    }

    private interface Stream {
        void run(int stream) throws Exception;
    }

    /** Runs every stream on its own client thread; the bytes received. */
    private long run(Stream body) throws Exception {
        List<Future<?>> all = new ArrayList<>();
        for (int i = 0; i < streams; i++) {
            int stream = i;
            all.add(clients.submit(() -> {
                body.run(stream);
                return null;
            }));
        }
        try {
            for (Future<?> f : all) {
                f.get();
            }
        } catch (ExecutionException e) {
            for (Future<?> f : all) {
                f.cancel(true);
            }
            throw e.getCause() instanceof Exception x ? x : e;
        }
        return received.get();
    }

    /** Where stream {@code stream}'s range at {@code off} goes. */
    private Sink sink(int stream, long off, int len) {
        return target != null ? new Sink(RawMemory.buffer(target.writable().address() + off, len), false)
                : new Sink(buffers[stream].clear(), true);
    }

    /** A destination: a range of the target mapping, or a reused buffer filled round and round. */
    private static final class Sink {
        private final ByteBuffer to;
        private final boolean cycle;

        Sink(ByteBuffer to, boolean cycle) {
            this.to = to;
            this.cycle = cycle;
        }

        /** The buffer to read at most {@code max} more bytes into. */
        ByteBuffer next(int max) {
            if (cycle && !to.hasRemaining()) {
                to.clear();
            }
            to.limit(Math.min(to.capacity(), to.position() + max));
            return to;
        }

        /** Copies a received gRPC message in; its length. */
        int take(InputStream m) throws IOException {
            int n = m.available();
            if (m instanceof HasByteBuffer h && h.byteBufferSupported()) {
                while (m.available() > 0) {
                    ByteBuffer b = h.getByteBuffer();
                    int k = b.remaining();
                    put(b);
                    m.skip(k);
                }
            } else {
                put(ByteBuffer.wrap(m.readAllBytes()));
            }
            return n;
        }

        private void put(ByteBuffer b) {
            while (b.hasRemaining()) {
                ByteBuffer into = next(b.remaining());
                int k = Math.min(into.remaining(), b.remaining());
                int lim = b.limit();
                b.limit(b.position() + k);
                into.put(b);
                b.limit(lim);
            }
        }
    }

    /** The exporter's answer to a 16-byte ask (offset, length; little-endian): the range, with sendfile. */
    private final class RangeServer extends ChannelInboundHandlerAdapter {
        private final ByteBuffer ask = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);

        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            ByteBuf in = (ByteBuf) msg;
            try {
                while (in.isReadable()) {
                    int n = Math.min(ask.remaining(), in.readableBytes());
                    in.readBytes(ask.array(), ask.position(), n);
                    ask.position(ask.position() + n);
                    if (!ask.hasRemaining()) {
                        long off = ask.getLong(0);
                        long len = ask.getLong(8);
                        ask.clear();
                        ctx.writeAndFlush(new SharedRegion(sourceFile, off, len));
                    }
                }
            } finally {
                in.release();
            }
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            ctx.close();
        }
    }

    /** A range of the shared read-only open (as SeedServer's): releasing it leaves the file open. */
    private static final class SharedRegion extends DefaultFileRegion {
        SharedRegion(FileChannel file, long position, long count) {
            super(file, position, count);
        }

        @Override
        protected void deallocate() {
            // the file stays open for the next range
        }
    }
}
