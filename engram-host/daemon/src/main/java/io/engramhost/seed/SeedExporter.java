package io.engramhost.seed;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.util.BindFailure;
import io.engramhost.util.Closer;
import io.engramhost.util.Threads;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
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
import io.netty.handler.ssl.SslHandler;
import io.netty.handler.stream.ChunkedWriteHandler;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * {@code serve --seed-listen}: the exporter of docs/seeding.md. A peer proves it holds the key (and the daemon proves
 * it too), may then ask for the manifest of the tables exported and for ranges of them, and gets each range sent from
 * the region itself ({@link RangeSource}: sendfile(2) from a memfd on Netty's epoll transport, {@link
 * DefaultFileRegion}, or the JDK's {@code transferTo} on its NIO transport; a buffer over memory the CPU may read for a
 * hugetlb memfd's mapping or a cuda-vmm region's CPU view). It takes nothing from its peers: no request changes the
 * daemon. What it reads the tables from is its owner's {@link ExportView}.
 *
 * <p>Each connection's pipeline: with TLS ({@link SeedTls}: {@code --seed-tls-*}) Netty's {@link SslHandler} over a
 * JDK engine (TLS 1.3, the peer's certificate required) and a {@link ChunkedWriteHandler} for the ranges in pieces;
 * then the {@link SeedFrameDecoder}, where every bound on what a peer sends is checked once, and the connection's
 * {@link ExportConnection}, which answers one frame at a time.
 *
 * <p>What it exports (the {@link ExportView.Export} and its MANIFEST) is made once, at the first request after the
 * tables are ready, on a thread of its own ({@code engram-seed-export}): no event loop waits for a CPU view of tens of
 * GiB; a request that comes meanwhile is answered once it is made. The exporter closes it in {@link #close}, after its
 * event loops have ended, so no range is sent from a closed view.
 *
 * <p>Limits (docs/seeding.md, "Limits"): at most {@link #MAX_PEERS} connections and {@link #MAX_HANDSHAKING} of them
 * unauthenticated, the handshake within {@link #HANDSHAKE_MILLIS} of the accept, {@link #IDLE_MILLIS} between
 * requests, a range taken within {@link #WRITE_MILLIS}. What breaks one gets an ERROR naming it (logged at most
 * {@link #LOGGED_PER_MINUTE} a minute, each counted), and the connection is closed. Its threads ({@code
 * engram-seed-io}) are its own: no peer holds up the Unix socket's poll loop or its workers.
 */
public final class SeedExporter implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(SeedExporter.class.getName());
    static final int MAX_PEERS = 64;
    static final int MAX_HANDSHAKING = 16;
    static final long HANDSHAKE_MILLIS = 5_000;
    static final long IDLE_MILLIS = 60_000;
    static final long WRITE_MILLIS = 60_000;
    /** Refusals logged per minute at most (each is counted in the metrics anyway). */
    static final int LOGGED_PER_MINUTE = 20;
    /** The bytes of requests a peer may send ahead of the one being answered: two of the largest. */
    static final int MAX_AHEAD = 2 * (SeedWire.HEADER + SeedWire.MAX_REQUEST_PAYLOAD);
    private static final int IO_THREADS = 2;

    /** The export made from the ready tables: each table's source, and the MANIFEST frame. */
    record Made(ExportView.Export export, List<RangeSource> sources, ByteBuffer manifest) {
    }

    final SeedKey key;
    final byte[] id;
    final SeedStats stats;
    final boolean tls;
    final AtomicInteger handshaking = new AtomicInteger();
    final RateLimitedLog refusals = new RateLimitedLog(LOG, LOGGED_PER_MINUTE);
    private final ExportView view;
    private final SeedTls tlsSettings;
    private final EventLoopGroup loop;
    private final Class<? extends ServerChannel> channelClass;
    private final List<Thread> threads = new ArrayList<>();
    private final Threads factory;
    private volatile Channel listener;
    /** Made at the first request once the tables are ready (guarded by this); closed with the exporter. */
    private CompletableFuture<Made> made;

    private SeedExporter(ExportView view, SeedSettings settings, SeedStats stats, Threads factory) {
        this.view = view;
        this.factory = factory;
        this.tlsSettings = settings.tls();
        this.tls = tlsSettings != null;
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

    /** Binds {@code settings.listen()} and serves {@code view}; a bind that fails is one line naming the flag. */
    public static SeedExporter start(ExportView view, SeedSettings settings, SeedStats stats, Threads threads) {
        SeedExporter s = new SeedExporter(view, settings, stats, threads);
        try {
            ChannelFuture bound = s.bootstrap().bind(settings.listen()).awaitUninterruptibly();
            if (!bound.isSuccess()) {
                Throwable e = bound.cause();
                throw new IllegalStateException("cannot listen on " + SeedSettings.show(settings.listen())
                        + " (--seed-listen): " + BindFailure.describe(e, "--seed-listen", "--seed-listen"));
            }
            s.listener = bound.channel();
            SeedAuth.warm(settings.key()); // before READY: the first peer's CHALLENGE then costs no JCA loading
        } catch (RuntimeException | Error e) {
            s.close();
            throw e;
        }
        LOG.log(INFO, "seed: exporting the tables to authenticated peers on " + SeedSettings.show(s.address())
                + " (" + stats.transport + (s.tls ? ", TLS 1.3 as " + s.tlsSettings.subject() : "") + ")");
        return s;
    }

    public InetSocketAddress address() {
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
                        if (tls) {
                            ch.pipeline().addLast(new SslHandler(tlsSettings.serverEngine()), new ChunkedWriteHandler());
                        }
                        SeedFrameDecoder frames = new SeedFrameDecoder(SeedWire.MAX_REQUEST_PAYLOAD, MAX_AHEAD);
                        ch.pipeline().addLast(frames, new ExportConnection(SeedExporter.this, ch, frames));
                    }
                });
    }

    /** One refusal: counted under {@code reason}, and its line logged unless too many were this minute. */
    void refuse(String reason, String line) {
        stats.refused(reason);
        refusals.warn("seed: " + line);
    }

    /** What is exported, being made or made, from the ready tables (null: not ready); closed with the exporter. */
    synchronized CompletableFuture<Made> export() {
        if (made != null) {
            return made;
        }
        ExportView.Maker maker = view.ready();
        if (maker == null) {
            return null;
        }
        CompletableFuture<Made> f = new CompletableFuture<>();
        made = f;
        factory.thread(() -> {
            try {
                f.complete(make(maker));
            } catch (IOException | RuntimeException e) {
                LOG.log(WARNING, "seed: cannot export the tables, so every peer is refused: " + e.getMessage());
                f.completeExceptionally(e);
            }
        }, "engram-seed-export").start();
        return f;
    }

    private Made make(ExportView.Maker maker) throws IOException {
        ExportView.Export e = maker.make();
        try {
            List<RangeSource> sources = new ArrayList<>();
            List<SeedWire.Table> wire = new ArrayList<>();
            for (ExportView.Table t : e.tables()) {
                sources.add(RangeSource.of(t.region(), tls));
                wire.add(new SeedWire.Table(t.name(), t.bytes(), t.digest()));
            }
            return new Made(e, List.copyOf(sources), SeedWire.manifest(e.fingerprintSha256(), wire));
        } catch (RuntimeException failed) {
            Closer.closeAllAfter(failed, e.owner());
            throw failed;
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
        CompletableFuture<Made> was;
        synchronized (this) {
            was = made;
            made = CompletableFuture.failedFuture(new IOException("the exporter is closed"));
        }
        Made m = null;
        if (was != null) {
            try {
                m = was.join(); // made, or being made: wait for it
            } catch (RuntimeException failed) {
                // a failed export closed what it had opened
            }
        }
        if (m != null) {
            try {
                Closer.closeAll(m.export().owner()); // the views and channels, once no event loop sends from them
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
