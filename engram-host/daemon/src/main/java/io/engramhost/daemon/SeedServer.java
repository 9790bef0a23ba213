package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.os.Fd;
import io.engramhost.os.RawMemory;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedSettings;
import io.engramhost.seed.SeedTls;
import io.engramhost.seed.SeedWire;
import io.engramhost.store.Catalog;
import io.engramhost.util.Closer;
import io.engramhost.util.Threads;
import io.engramhost.vmm.Access;
import io.engramhost.vmm.VmmImport;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufAllocator;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.DefaultFileRegion;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.IoHandlerFactory;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.ServerChannel;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollIoHandler;
import io.netty.channel.epoll.EpollServerSocketChannel;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.DecoderException;
import io.netty.handler.ssl.NotSslRecordException;
import io.netty.handler.ssl.SslHandler;
import io.netty.handler.ssl.SslHandshakeCompletionEvent;
import io.netty.handler.stream.ChunkedInput;
import io.netty.handler.stream.ChunkedWriteHandler;
import io.netty.util.concurrent.ScheduledFuture;
import java.io.IOException;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

/**
 * {@code serve --seed-listen}: the exporter of docs/seeding.md. A peer proves it holds the key (and the daemon proves
 * it too), may then ask for the manifest of the host tables served and for ranges of them, and gets each range sent
 * from the region itself: a 4 KiB memfd's bytes go out with sendfile(2) (Netty's epoll transport, {@link DefaultFileRegion}
 * over a read-only open of the memfd), or with the JDK's {@code transferTo} where the NIO transport serves instead. A
 * hugetlb memfd's go out of a read-only mapping of it (sendfile(2) from hugetlbfs fails with EINVAL), as a buffer over
 * the mapping like a cuda-vmm view's. A cuda-vmm region cannot be read through its fd (a driver handle), so its bytes go out from a CPU view of it: the
 * host regions' fds imported into one VA range with CPU access, read-only ({@link VmmImport}, as a client's CPU view
 * and the takeover's digest check make it), each range a {@link ByteBuf} over the view's memory (written by the
 * transport straight from it, no copy). It takes nothing from its peers: no request changes the daemon.
 *
 * <p>With TLS ({@link SeedTls}: {@code --seed-tls-*}) each connection begins with Netty's {@link SslHandler} over a
 * JDK engine, TLS 1.3, the peer's certificate required; neither sendfile nor a buffer of a whole range can go
 * through it, so a range is sent in pieces of {@link #TLS_PIECE} bytes ({@link ChunkedWriteHandler}, which writes
 * the next only once the socket has taken the last): read from the memfd with a positional read into a buffer of
 * the transport's, or a buffer over the CPU view's memory.
 *
 * <p>What it exports (the channels or the view, and the MANIFEST) is made once, at the first request after the
 * daemon is ready, on a thread of its own ({@code engram-seed-export}: a CPU view of tens of GiB takes about a second,
 * which no event loop waits for); a request that comes meanwhile is answered once it is made. The server owns all of
 * it and closes it in {@link #close}, after its event loops have ended, so no range is sent from a closed view.
 *
 * <p>Every limit is checked where the input enters, once: a frame's length at its header ({@link
 * SeedWire#MAX_REQUEST_PAYLOAD}, the one bound of what a peer may send), the handshake within {@link
 * #HANDSHAKE_MILLIS}, at most {@link #MAX_PEERS} connections and {@link #MAX_HANDSHAKING} of them unauthenticated,
 * a range within its table and at most {@link SeedWire#MAX_RANGE}, one request answered at a time with at most one
 * more waiting, a range taken within {@link #WRITE_MILLIS}, and {@link #IDLE_MILLIS} between requests. What breaks
 * one gets an ERROR naming it, and the connection is closed. Its threads ({@code engram-seed-io}) are its own: no
 * peer holds up the Unix socket's poll loop or its workers.
 */
final class SeedServer implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(SeedServer.class.getName());
    static final int MAX_PEERS = 64;
    static final int MAX_HANDSHAKING = 16;
    static final long HANDSHAKE_MILLIS = 5_000;
    static final long IDLE_MILLIS = 60_000;
    static final long WRITE_MILLIS = 60_000;
    /** Refusals logged per minute at most (each is counted in the metrics anyway). */
    static final int LOGGED_PER_MINUTE = 20;
    private static final int IO_THREADS = 2;
    private static final int FRAME_MAX = SeedWire.HEADER + SeedWire.MAX_REQUEST_PAYLOAD;
    /** Under TLS, a range is sent in pieces of this many bytes. */
    static final int TLS_PIECE = 256 << 10;

    /** What the metrics see. */
    static final class Stats {
        final AtomicLong bytesSent = new AtomicLong();
        final AtomicLong rangesSent = new AtomicLong();
        final Map<String, AtomicLong> refused = new ConcurrentHashMap<>();
        final AtomicInteger open = new AtomicInteger();
        volatile String transport = "none";

        void refused(String reason) {
            refused.computeIfAbsent(reason, k -> new AtomicLong()).incrementAndGet();
        }
    }

    /** Where a region's bytes are sent from: a message of the transport for {@code length} bytes at {@code offset}. */
    @FunctionalInterface
    interface RangeSource {
        Object range(long offset, long length);
    }

    /** A memfd's ranges: sendfile(2) (or transferTo) from a read-only open of it, shared by every range. */
    static RangeSource fromFile(FileChannel region) {
        return (offset, length) -> new SharedRegion(region, offset, length);
    }

    /** A memfd's ranges under TLS: pieces read from the shared read-only open into the transport's buffers. */
    static RangeSource fromFileInPieces(FileChannel region) {
        return (offset, length) -> new Pieces(offset, length, (alloc, at, n) -> {
            ByteBuf b = alloc.directBuffer(n);
            try {
                while (b.writerIndex() < n) {
                    if (b.writeBytes(region, at + b.writerIndex(), n - b.writerIndex()) < 0) {
                        throw new IOException("the region ends before " + (at + n));
                    }
                }
                return b;
            } catch (IOException | RuntimeException e) {
                b.release();
                throw e;
            }
        });
    }

    /** Ranges of memory at {@code base} under TLS: pieces that are buffers over the memory itself. */
    static RangeSource fromMemoryInPieces(long base) {
        return (offset, length) -> new Pieces(offset, length, (alloc, at, n) ->
                Unpooled.wrappedBuffer(RawMemory.buffer(base + at, n)));
    }

    /** One piece of a range, {@code n} bytes at {@code at}, as a buffer the transport releases once written. */
    @FunctionalInterface
    interface PieceReader {
        ByteBuf read(ByteBufAllocator alloc, long at, int n) throws IOException;
    }

    /** A range as {@link #TLS_PIECE}-byte pieces, for {@link ChunkedWriteHandler}; it holds nothing to close. */
    static final class Pieces implements ChunkedInput<ByteBuf> {
        private final long start;
        private final long length;
        private final PieceReader reader;
        private long done;

        Pieces(long start, long length, PieceReader reader) {
            this.start = start;
            this.length = length;
            this.reader = reader;
        }

        @Override
        public boolean isEndOfInput() {
            return done >= length;
        }

        @Override
        public void close() {
            // the region's channel or view is the server's
        }

        @Deprecated
        @Override
        public ByteBuf readChunk(ChannelHandlerContext ctx) throws Exception {
            return readChunk(ctx.alloc());
        }

        @Override
        public ByteBuf readChunk(ByteBufAllocator allocator) throws Exception {
            if (done >= length) {
                return null;
            }
            int n = (int) Math.min(TLS_PIECE, length - done);
            ByteBuf b = reader.read(allocator, start + done, n);
            done += n;
            return b;
        }

        @Override
        public long length() {
            return length;
        }

        @Override
        public long progress() {
            return done;
        }
    }

    /**
     * Ranges of memory at {@code base} (a CPU view of a region), each a buffer over the memory itself: the transport
     * writes from it, and releasing the buffer frees nothing (the view's owner unmaps it). A range is at most
     * {@link SeedWire#MAX_RANGE}, checked before.
     */
    static RangeSource fromMemory(long base) {
        return (offset, length) -> Unpooled.wrappedBuffer(RawMemory.buffer(base + offset, Math.toIntExact(length)));
    }

    /** One table as exported: its region's source and where the table lies in it. */
    private record Exported(String name, long bytes, long digest, RangeSource region, long offset) {
    }

    /** What is exported, made once from the ready catalog: the tables, the MANIFEST, and what they are sent from. */
    private record Export(List<Exported> tables, ByteBuffer manifest, List<AutoCloseable> owned) {
    }

    private final Supplier<Catalog> catalog;
    private final SeedKey key;
    private final byte[] id;
    private final Stats stats;
    private final EventLoopGroup loop;
    private final Class<? extends ServerChannel> channelClass;
    private final AtomicInteger handshaking = new AtomicInteger();
    private final AtomicLong logWindow = new AtomicLong();
    private final AtomicInteger logged = new AtomicInteger();
    private final List<Thread> threads = new ArrayList<>();
    private final Threads factory;
    private final int vmmDevice;
    private final SeedTls tls;
    private volatile Channel listener;
    /** Made at the first request once the catalog is ready (guarded by this); what it holds closes with the server. */
    private CompletableFuture<Export> export;

    private SeedServer(Supplier<Catalog> catalog, SeedSettings settings, Stats stats, Threads factory,
            int vmmDevice) {
        this.catalog = catalog;
        this.factory = factory;
        this.vmmDevice = vmmDevice;
        this.tls = settings.tls();
        this.key = settings.key();
        this.id = settings.instanceId();
        this.stats = stats;
        IoHandlerFactory io;
        if (Epoll.isAvailable()) {
            io = EpollIoHandler.newFactory();
            channelClass = EpollServerSocketChannel.class;
            stats.transport = "epoll";
        } else {
            io = NioIoHandler.newFactory();
            channelClass = NioServerSocketChannel.class;
            stats.transport = "nio";
            LOG.log(INFO, "seed: Netty's epoll transport is not available (" + Epoll.unavailabilityCause()
                    + "); serving seeds with the NIO transport");
        }
        this.loop = new MultiThreadIoEventLoopGroup(IO_THREADS, (ThreadFactory) r -> {
            Thread t = factory.thread(r, "engram-seed-io");
            synchronized (threads) {
                threads.add(t);
            }
            return t;
        }, io);
    }

    /**
     * Binds {@code settings.listen()} and serves; a bind that fails is one line naming the flag. {@code vmmDevice}:
     * the GPU whose context makes the CPU view of cuda-vmm regions (the one the regions were made in).
     */
    static SeedServer start(Supplier<Catalog> catalog, SeedSettings settings, Stats stats, Threads threads,
            int vmmDevice) {
        SeedServer s = new SeedServer(catalog, settings, stats, threads, vmmDevice);
        try {
            ChannelFuture bound = s.bootstrap().bind(settings.listen()).awaitUninterruptibly();
            if (!bound.isSuccess()) {
                Throwable e = bound.cause();
                throw new IllegalStateException("cannot listen on " + SeedSettings.show(settings.listen())
                        + " (--seed-listen): " + (e instanceof BindException ? e.getMessage() : e));
            }
            s.listener = bound.channel();
            SeedAuth.warm(settings.key()); // before READY: the first peer's CHALLENGE then costs no JCA loading
        } catch (RuntimeException | Error e) {
            s.close();
            throw e;
        }
        LOG.log(INFO, "seed: exporting the tables to authenticated peers on " + SeedSettings.show(s.address())
                + " (" + stats.transport + (s.tls != null ? ", TLS 1.3 as " + s.tls.subject() : "") + ")");
        return s;
    }

    InetSocketAddress address() {
        return (InetSocketAddress) listener.localAddress();
    }

    private ServerBootstrap bootstrap() {
        return new ServerBootstrap().group(loop).channel(channelClass)
                .option(ChannelOption.SO_BACKLOG, 128)
                .childOption(ChannelOption.TCP_NODELAY, true)
                .childOption(ChannelOption.AUTO_READ, true)
                .childHandler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    protected void initChannel(SocketChannel ch) {
                        if (tls != null) {
                            ch.pipeline().addLast(new SslHandler(tls.serverEngine()), new ChunkedWriteHandler());
                        }
                        ch.pipeline().addLast(new Peer(ch));
                    }
                });
    }

    private void refuse(String reason, String line) {
        stats.refused(reason);
        long minute = System.nanoTime() / 60_000_000_000L;
        if (logWindow.getAndSet(minute) != minute) {
            logged.set(0);
        }
        if (logged.incrementAndGet() <= LOGGED_PER_MINUTE) {
            LOG.log(WARNING, "seed: " + line);
        }
    }

    /** What is exported, being made or made, from the ready catalog (null: not ready); closed with the server. */
    private synchronized CompletableFuture<Export> export() {
        if (export != null) {
            return export;
        }
        Catalog c = catalog.get();
        if (c == null) {
            return null;
        }
        CompletableFuture<Export> f = new CompletableFuture<>();
        export = f;
        factory.thread(() -> {
            try {
                f.complete(exportOf(c));
            } catch (IOException | RuntimeException e) {
                LOG.log(WARNING, "seed: cannot export the tables, so every peer is refused: " + e.getMessage());
                f.completeExceptionally(e);
            }
        }, "engram-seed-export").start();
        return f;
    }

    /**
     * The host tables of {@code c} and their sources: a read-only open of each memfd region, and one CPU view of
     * every cuda-vmm host region. A failure closes what was opened.
     */
    private Export exportOf(Catalog c) throws IOException {
        Catalog.Served host = c.servedTo(-1);
        List<Manifest.Region> regions = host.manifest().regions();
        Closer<AutoCloseable> owned = new Closer<>();
        try {
            RangeSource[] byRegion = new RangeSource[regions.size()];
            List<Integer> vmm = new ArrayList<>();
            for (int i = 0; i < regions.size(); i++) {
                RegionKind kind = regions.get(i).kind();
                if (kind == RegionKind.MEMFD_HUGETLB) {
                    // sendfile(2) from a hugetlbfs file fails with EINVAL: its ranges go out of a read-only mapping
                    long base = owned.add(ReadOnlyMapping.map(host.fds().get(i), regions.get(i).size(), false))
                            .address();
                    byRegion[i] = tls != null ? fromMemoryInPieces(base) : fromMemory(base);
                } else if (kind.memfd()) {
                    FileChannel region = owned.add(FileChannel.open(Path.of("/proc/self/fd/"
                            + host.fds().get(i).get()), StandardOpenOption.READ));
                    byRegion[i] = tls != null ? fromFileInPieces(region) : fromFile(region);
                } else if (kind == RegionKind.VMM_HOST) {
                    vmm.add(i);
                }
            }
            if (!vmm.isEmpty()) {
                List<Fd> fds = new ArrayList<>();
                List<Long> sizes = new ArrayList<>();
                for (int i : vmm) {
                    fds.add(host.fds().get(i));
                    sizes.add(regions.get(i).size());
                }
                long t0 = System.nanoTime();
                VmmImport view = owned.add(VmmImport.attach(fds, sizes, vmmDevice, Access.READ_ONLY.withCpuView()));
                for (int k = 0; k < vmm.size(); k++) {
                    byRegion[vmm.get(k)] = tls != null ? fromMemoryInPieces(view.base(k)) : fromMemory(view.base(k));
                }
                LOG.log(INFO, "seed: a CPU view of " + vmm.size() + " cuda-vmm regions to export them from, made in "
                        + String.format("%.2f s", (System.nanoTime() - t0) / 1e9));
            }
            List<Exported> out = new ArrayList<>();
            List<SeedWire.Table> wire = new ArrayList<>();
            for (Manifest.Table t : host.manifest().tables()) {
                if (t.region() < 0 || t.device() >= 0) {
                    continue;
                }
                RangeSource from = byRegion[t.region()];
                if (from == null) {
                    throw new IOException("table '" + t.name() + "' is in region " + t.region() + " ("
                            + regions.get(t.region()).kind() + "), which this exporter has no view of");
                }
                out.add(new Exported(t.name(), t.bytes(), t.digest(), from, t.offset()));
                wire.add(new SeedWire.Table(t.name(), t.bytes(), t.digest()));
            }
            return new Export(List.copyOf(out), SeedWire.manifest(HexFormat.of().parseHex(c.fingerprintSha256()),
                    wire), owned.items());
        } catch (IOException | RuntimeException e) {
            owned.closeAfter(e);
            throw e;
        }
    }

    /** A region range that leaves its channel open when released (the channel is the server's, shared). */
    private static final class SharedRegion extends DefaultFileRegion {
        SharedRegion(FileChannel file, long position, long count) {
            super(file, position, count);
        }

        @Override
        protected void deallocate() {
            // the channel stays open for the next range; the server closes it
        }
    }

    private enum Step {
        HELLO, PROOF, READY, CLOSED
    }

    /** One peer's connection; everything on its event loop. */
    private final class Peer extends ChannelInboundHandlerAdapter {
        private final SocketChannel ch;
        private final ByteBuffer in = ByteBuffer.allocate(2 * FRAME_MAX).order(ByteOrder.LITTLE_ENDIAN);
        private Step step = Step.HELLO;
        private boolean answering;
        /** A range is being written: what is written after it waits until the peer has taken it. */
        private boolean sending;
        private boolean counted;
        private ScheduledFuture<?> deadline;
        private byte[] clientNonce;
        private byte[] serverNonce;
        private byte[] clientId;
        private final String who;

        Peer(SocketChannel ch) {
            this.ch = ch;
            InetSocketAddress r = ch.remoteAddress();
            this.who = r == null ? "?" : SeedSettings.show(r);
        }

        @Override
        public void channelActive(ChannelHandlerContext ctx) {
            if (stats.open.incrementAndGet() > MAX_PEERS) {
                stats.open.decrementAndGet();
                fail("busy", SeedWire.BUSY, MAX_PEERS + " peers are connected already (the most at once)");
                return;
            }
            counted = true;
            if (handshaking.incrementAndGet() > MAX_HANDSHAKING) {
                handshaking.decrementAndGet();
                step = Step.CLOSED;
                stats.open.decrementAndGet();
                counted = false;
                fail("busy", SeedWire.BUSY, MAX_HANDSHAKING + " peers are authenticating already (the most at once)");
                return;
            }
            deadline(HANDSHAKE_MILLIS, "timed-out", "did not authenticate within " + HANDSHAKE_MILLIS + " ms");
        }

        @Override
        public void channelInactive(ChannelHandlerContext ctx) {
            if (step == Step.HELLO || step == Step.PROOF) {
                handshaking.decrementAndGet();
            }
            step = Step.CLOSED;
            if (counted) {
                counted = false;
                stats.open.decrementAndGet();
            }
            if (deadline != null) {
                deadline.cancel(false);
            }
        }

        private void deadline(long millis, String reason, String line) {
            if (deadline != null) {
                deadline.cancel(false);
            }
            deadline = ch.eventLoop().schedule(() -> fail(reason, SeedWire.TIMED_OUT, line), millis,
                    TimeUnit.MILLISECONDS);
        }

        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            ByteBuf b = (ByteBuf) msg;
            try {
                if (step == Step.CLOSED) {
                    return;
                }
                if (b.readableBytes() > in.remaining()) {
                    fail("bad-request", SeedWire.BAD_REQUEST, "sent more than " + in.capacity() + " bytes of requests"
                            + " ahead of their answers: send at most one request ahead of the one being answered");
                    return;
                }
                byte[] bytes = new byte[b.readableBytes()];
                b.readBytes(bytes);
                in.put(bytes);
            } finally {
                b.release();
            }
            drain();
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            end("error", "peer " + who + ": " + cause + "; closing its connection");
        }

        @Override
        public void userEventTriggered(ChannelHandlerContext ctx, Object evt) {
            if (evt instanceof SslHandshakeCompletionEvent e && !e.isSuccess()) {
                Throwable c = e.cause() instanceof DecoderException && e.cause().getCause() != null
                        ? e.cause().getCause() : e.cause();
                end("tls", "peer " + who + " refused: " + (c instanceof NotSslRecordException ? "it does not speak TLS"
                        : "its TLS handshake failed (" + c.getMessage() + ")") + "; a peer needs --seed-tls-cert,"
                        + " --seed-tls-key and --seed-tls-ca too, its certificate signed by this daemon's CA");
            }
            ctx.fireUserEventTriggered(evt);
        }

        /** One line, and the connection closed without an ERROR (it cannot carry one: it broke, or TLS failed). */
        private void end(String reason, String line) {
            if (step == Step.CLOSED) {
                return;
            }
            if (step == Step.HELLO || step == Step.PROOF) {
                handshaking.decrementAndGet();
            }
            step = Step.CLOSED;
            if (deadline != null) {
                deadline.cancel(false);
            }
            refuse(reason, line);
            ch.close();
        }

        /** Handles every complete frame held, unless an answer is being written. */
        private void drain() {
            while (step != Step.CLOSED && !answering) {
                in.flip();
                if (in.remaining() < SeedWire.HEADER) {
                    in.compact();
                    return;
                }
                int type = Byte.toUnsignedInt(in.get(0));
                long n = Integer.toUnsignedLong(in.getInt(4));
                if (in.get(1) != 0 || in.getShort(2) != 0) {
                    in.compact();
                    fail("bad-request", SeedWire.BAD_REQUEST, "a frame header's reserved bytes are not 0");
                    return;
                }
                if (n > SeedWire.MAX_REQUEST_PAYLOAD) {
                    in.compact();
                    fail("bad-request", SeedWire.BAD_REQUEST, SeedWire.name(type) + " of " + n + " bytes: a request"
                            + " has at most " + SeedWire.MAX_REQUEST_PAYLOAD);
                    return;
                }
                if (in.remaining() < SeedWire.HEADER + n) {
                    in.compact();
                    return;
                }
                byte[] payload = new byte[(int) n];
                in.position(SeedWire.HEADER);
                in.get(payload);
                in.compact();
                handle(type, ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN));
            }
        }

        private void handle(int type, ByteBuffer p) {
            switch (step) {
                case HELLO -> hello(type, p);
                case PROOF -> proof(type, p);
                case READY -> request(type, p);
                default -> {
                }
            }
        }

        private void hello(int type, ByteBuffer p) {
            if (type != SeedWire.HELLO || p.remaining() != SeedWire.HELLO_BYTES) {
                fail("bad-request", SeedWire.BAD_REQUEST, "expected HELLO of " + SeedWire.HELLO_BYTES + " bytes, got "
                        + SeedWire.name(type) + " of " + p.remaining());
                return;
            }
            int magic = p.getInt();
            int version = Short.toUnsignedInt(p.getShort());
            p.getShort();
            if (magic != SeedWire.MAGIC || version != SeedWire.VERSION) {
                fail("bad-request", SeedWire.BAD_REQUEST, "not a seeding HELLO of version " + SeedWire.VERSION
                        + " (magic " + Integer.toHexString(magic) + ", version " + version + ")");
                return;
            }
            clientNonce = new byte[SeedAuth.NONCE_BYTES];
            clientId = new byte[SeedAuth.ID_BYTES];
            p.get(clientNonce).get(clientId);
            serverNonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
            ByteBuffer c = SeedWire.frame(SeedWire.CHALLENGE, SeedWire.CHALLENGE_BYTES);
            c.putShort((short) SeedWire.VERSION).putShort((short) 0).put(serverNonce).put(id)
                    .put(SeedAuth.serverProof(key, clientNonce, serverNonce, clientId, id));
            ch.writeAndFlush(Unpooled.wrappedBuffer(c.flip()));
            step = Step.PROOF;
        }

        private void proof(int type, ByteBuffer p) {
            if (type != SeedWire.PROOF || p.remaining() != SeedAuth.MAC_BYTES) {
                fail("bad-request", SeedWire.BAD_REQUEST, "expected PROOF, got " + SeedWire.name(type));
                return;
            }
            byte[] mac = new byte[SeedAuth.MAC_BYTES];
            p.get(mac);
            if (!SeedAuth.same(mac, SeedAuth.clientProof(key, clientNonce, serverNonce, clientId, id))) {
                fail("not-authenticated", SeedWire.NOT_AUTHENTICATED, "did not prove it holds the seed key: its"
                        + " --seed-key file differs from this daemon's; give every node the same --seed-key file");
                return;
            }
            handshaking.decrementAndGet();
            step = Step.READY;
            deadline(IDLE_MILLIS, "timed-out", "sent no request for " + IDLE_MILLIS + " ms");
        }

        private void request(int type, ByteBuffer p) {
            CompletableFuture<Export> made = export();
            if (made == null) {
                fail("not-ready", SeedWire.NOT_READY, "this daemon is still loading its tables");
                return;
            }
            if (!made.isDone()) { // answered once the export is made, on this connection's event loop
                answering = true;
                ch.config().setAutoRead(false);
                made.whenComplete((x, e) -> ch.eventLoop().execute(() -> {
                    answering = false;
                    if (step == Step.CLOSED) {
                        return;
                    }
                    ch.config().setAutoRead(true);
                    request(type, p);
                    drain();
                }));
                return;
            }
            Export ex;
            try {
                ex = made.join();
            } catch (RuntimeException e) {
                Throwable c = e.getCause() != null ? e.getCause() : e;
                fail("unavailable", SeedWire.NOT_READY, "cannot export the tables: " + c.getMessage());
                return;
            }
            List<Exported> tables = ex.tables();
            if (type == SeedWire.MANIFEST_REQUEST && p.remaining() == 0) {
                ch.writeAndFlush(Unpooled.wrappedBuffer(ex.manifest().duplicate()));
                deadline(IDLE_MILLIS, "timed-out", "sent no request for " + IDLE_MILLIS + " ms");
                return;
            }
            if (type != SeedWire.RANGE || p.remaining() != SeedWire.RANGE_BYTES) {
                fail("bad-request", SeedWire.BAD_REQUEST, "expected MANIFEST_REQUEST or RANGE, got "
                        + SeedWire.name(type) + " of " + p.remaining() + " bytes");
                return;
            }
            long table = Integer.toUnsignedLong(p.getInt());
            long offset = p.getLong();
            long length = Integer.toUnsignedLong(p.getInt());
            if (table >= tables.size()) {
                fail("bad-request", SeedWire.BAD_REQUEST, "RANGE of table " + table + ": there are " + tables.size());
                return;
            }
            Exported t = tables.get((int) table);
            if (length == 0 || length > SeedWire.MAX_RANGE || offset < 0 || offset > t.bytes() - length) {
                fail("bad-request", SeedWire.BAD_REQUEST, "RANGE of table '" + t.name() + "' (" + t.bytes()
                        + " bytes): " + length + " bytes at " + offset + " is not within it, or over "
                        + SeedWire.MAX_RANGE);
                return;
            }
            ByteBuffer head = SeedWire.dataHead((int) table, offset, length);
            answering = true;
            ch.config().setAutoRead(false);
            deadline(WRITE_MILLIS, "timed-out", "did not take a range of " + length + " bytes within " + WRITE_MILLIS
                    + " ms");
            sending = true;
            ch.write(Unpooled.wrappedBuffer(head));
            ch.writeAndFlush(t.region().range(t.offset() + offset, length)).addListener(
                    (ChannelFutureListener) f -> {
                        sending = false;
                        if (!f.isSuccess() && step != Step.CLOSED) {
                            step = Step.CLOSED;
                            refuse("error", "peer " + who + ": sending " + length + " bytes of table '" + t.name()
                                    + "' failed (" + f.cause() + "); the connection is closed");
                        }
                        if (!f.isSuccess() || step == Step.CLOSED) {
                            ch.close();
                            return;
                        }
                        stats.bytesSent.addAndGet(length);
                        stats.rangesSent.incrementAndGet();
                        answering = false;
                        deadline(IDLE_MILLIS, "timed-out", "sent no request for " + IDLE_MILLIS + " ms");
                        ch.config().setAutoRead(true);
                        drain();
                    });
        }

        /** One line, an ERROR to the peer, and the connection closed. */
        private void fail(String reason, int code, String line) {
            if (step == Step.CLOSED && !"busy".equals(reason)) {
                return;
            }
            boolean wasHandshaking = step == Step.HELLO || step == Step.PROOF;
            if (wasHandshaking && !"busy".equals(reason)) {
                handshaking.decrementAndGet();
            }
            step = Step.CLOSED;
            if (deadline != null) {
                deadline.cancel(false);
            }
            refuse(reason, "peer " + who + " refused: " + line);
            ch.config().setAutoRead(false);
            if (sending) { // an ERROR would wait behind the range for a peer that does not read it: close at once
                ch.close();
                return;
            }
            ch.writeAndFlush(Unpooled.wrappedBuffer(SeedWire.error(code, line))).addListener(ChannelFutureListener.CLOSE);
        }
    }

    @Override
    public void close() {
        loop.shutdownGracefully(0, 0, TimeUnit.MILLISECONDS).awaitUninterruptibly(10, TimeUnit.SECONDS);
        List<Thread> all;
        synchronized (threads) {
            all = List.copyOf(threads);
        }
        boolean interrupted = false;
        for (Thread t : all) {
            try {
                t.join(10_000);
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        CompletableFuture<Export> made;
        synchronized (this) {
            made = export;
            export = CompletableFuture.failedFuture(new IOException("the exporter is closed"));
        }
        Export ex = null;
        if (made != null) {
            try {
                ex = made.join(); // made, or being made: wait for it
            } catch (RuntimeException failed) {
                // a failed export closed what it had opened
            }
        }
        if (ex != null) {
            try {
                Closer.closeAll(ex.owned()); // the views and channels, once no event loop sends from them
            } catch (RuntimeException e) {
                LOG.log(WARNING, "seed: closing the exporter's views of the regions failed (the daemon is stopping"
                        + " anyway): " + e);
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
