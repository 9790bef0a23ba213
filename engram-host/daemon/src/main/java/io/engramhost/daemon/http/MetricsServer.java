package io.engramhost.daemon.http;

import static java.lang.System.Logger.Level.INFO;

import io.engramhost.protocol.DaemonState;
import io.engramhost.util.BindFailure;
import io.engramhost.util.Threads;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufAllocator;
import io.netty.buffer.Unpooled;
import io.netty.buffer.UnpooledByteBufAllocator;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.DefaultMaxMessagesRecvByteBufAllocator;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.DefaultHttpHeaders;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpDecoderConfig;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpHeaders;
import io.netty.handler.codec.http.HttpHeadersFactory;
import io.netty.handler.codec.http.HttpObject;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpServerCodec;
import io.netty.handler.codec.http.HttpVersion;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.ScheduledFuture;
import io.netty.util.internal.logging.InternalLoggerFactory;
import io.netty.util.internal.logging.JdkLoggerFactory;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * {@code serve --metrics-port}: the HTTP server for Prometheus and for probes, on Netty's NIO transport.
 * {@code /metrics} (text format 0.0.4, written by the Prometheus client library's {@link PrometheusTextFormatWriter}
 * from the daemon's own registry, which it is given), {@code /ready} (200 only when ready), {@code /live} (200
 * while the poll loop goes round). GET and HEAD only, no request body is read, nothing it receives changes the
 * daemon.
 *
 * <p>No peer holds a thread. One event loop ({@code engram-http}) accepts, reads whatever has arrived on any
 * connection and answers a request as soon as its head is complete; /ready and /live are answered there at once,
 * from what the daemon keeps anyway (its state, the poll loop's heartbeat), with no lock that the poll loop or the
 * workers hold. /metrics pages are written on a thread of their own ({@code engram-http-scrape}), at most
 * {@link #MAX_SCRAPES} at once, so that a scrape never delays a probe.
 *
 * <p>Every connection carries one request (answers say {@code Connection: close}) and is bounded at each step: it
 * must send its first byte within {@link #IDLE_MILLIS}, complete its request head within {@link #REQUEST_MILLIS} of
 * that byte, take its answer within {@link #REQUEST_MILLIS}, and close within {@link #REQUEST_MILLIS} of it (what it
 * sends meanwhile is read and dropped, so that closing never resets an answer it has yet to read). The head is at
 * most {@link #MAX_REQUEST_LINE} + {@link #MAX_HEADERS} bytes, read {@link #READ_BYTES} at a time into heap buffers
 * (no direct memory of Netty's own). At most {@link #MAX_CONNECTIONS} connections are open: one more evicts the
 * oldest that is not being answered, so a probe, answered as soon as its request arrives, is never the one refused.
 */
public final class MetricsServer implements AutoCloseable {
    /**
     * Netty's own lines (rare: an accept that failed, say), through System.Logger like every other line; held here
     * because java.util.logging holds its loggers weakly, and would forget the handler.
     */
    @SuppressWarnings("unused")
    private static final Logger NETTY_LOG = nettyLog();
    private static final System.Logger LOG = System.getLogger(MetricsServer.class.getName());
    /** /live fails once the poll loop has not gone round for this long (it goes round at least every second). */
    static final long LIVE_STALE_SECONDS = 10;
    /** From a connection's accept to its first byte. */
    static final long IDLE_MILLIS = 10_000;
    /** From a request's first byte to its head's end; for the answer to be taken; from the answer to the close. */
    static final long REQUEST_MILLIS = 2_000;
    /** Connections open at once; one more evicts the oldest that is not being answered. */
    static final int MAX_CONNECTIONS = 2048;
    /** The request line's bytes, at most. */
    static final int MAX_REQUEST_LINE = 1024;
    /** The headers' bytes, at most. */
    static final int MAX_HEADERS = 4096;
    /** /metrics answers being made or written at once; past that, 503. */
    static final int MAX_SCRAPES = 4;
    /** Bytes of one read from a connection. */
    static final int READ_BYTES = 1024;
    private static final int BACKLOG = 1024;
    private static final PrometheusTextFormatWriter WRITER = PrometheusTextFormatWriter.create();
    /** {@code text/plain; version=0.0.4; charset=utf-8} */
    static final String CONTENT_TYPE = WRITER.getContentType();
    private static final String TEXT = "text/plain; charset=utf-8";
    private static final String PATHS = "(/metrics, /ready, /live)";
    private static final ByteBufAllocator HEAP = new UnpooledByteBufAllocator(false, true);

    private final Probes daemon;
    private final HttpStats http = new HttpStats();
    private final PrometheusRegistry registry;
    private final List<Thread> threads = new ArrayList<>();
    private final EventLoopGroup loop;
    private final ExecutorService scrapes;
    /** Open connections, oldest first (the event loop's only). */
    private final LinkedHashSet<Peer> peers = new LinkedHashSet<>();
    /** /metrics answers under way (the event loop's only). */
    private int scraping;
    private volatile Channel listener;

    /** What the probes read of the daemon: its state (/ready) and when its poll loop last went round (/live). */
    public interface Probes {
        DaemonState state();

        /** When the poll loop last went round (System.nanoTime). */
        long heartbeatNanos();

        /** Seconds since the poll loop last went round. */
        default double heartbeatAgeSeconds() {
            return (System.nanoTime() - heartbeatNanos()) / 1e9;
        }
    }

    private MetricsServer(Probes daemon, Function<HttpStats, PrometheusRegistry> metrics, Threads threads) {
        this.daemon = daemon;
        this.registry = metrics.apply(http);
        this.loop = new MultiThreadIoEventLoopGroup(1, (ThreadFactory) r -> thread(threads, r, "engram-http"),
                NioIoHandler.newFactory());
        this.scrapes = new ThreadPoolExecutor(1, 1, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(),
                r -> thread(threads, r, "engram-http-scrape"));
    }

    private Thread thread(Threads factory, Runnable task, String name) {
        Thread t = factory.thread(task, name);
        synchronized (threads) {
            threads.add(t);
        }
        return t;
    }

    /** How long a successor retries binding the port its predecessor frees as it exits. */
    public static final long AFTER_HANDOVER_RETRY_MILLIS = 10_000;

    /**
     * Binds {@code where} ({@code --metrics-address}, {@code --metrics-port}) and starts answering: the probes from
     * {@code daemon}, /metrics from the registry {@code metrics} makes (given the server's own connection counts to
     * include); a port in use fails with one line naming it, after {@code retryMillis} of retries (a successor's
     * predecessor frees the port as it exits: a listening TCP socket is not among what a handover passes on).
     */
    public static MetricsServer start(Probes daemon, Function<HttpStats, PrometheusRegistry> metrics,
            InetSocketAddress where, Threads threads, long retryMillis) {
        long deadline = System.nanoTime() + retryMillis * 1_000_000L;
        MetricsServer m = new MetricsServer(daemon, metrics, threads);
        boolean interrupted = false;
        try {
            while (true) {
                ChannelFuture bound = m.bootstrap().bind(where).awaitUninterruptibly();
                if (bound.isSuccess()) {
                    m.listener = bound.channel();
                    break;
                }
                if (System.nanoTime() >= deadline || interrupted) {
                    Throwable e = bound.cause();
                    throw new IllegalStateException("cannot listen on " + hostPort(where) + " (--metrics-port): "
                            + BindFailure.describe(e, "--metrics-port", "--metrics-address"));
                }
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    interrupted = true; // one more try, then the bind's error
                }
            }
        } catch (RuntimeException | Error e) {
            m.close();
            throw e;
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        LOG.log(INFO, "metrics and health on http://" + hostPort(m.address()) + "/ " + PATHS);
        return m;
    }

    private ServerBootstrap bootstrap() {
        return new ServerBootstrap().group(loop).channel(NioServerSocketChannel.class)
                .option(ChannelOption.SO_BACKLOG, BACKLOG)
                .childOption(ChannelOption.ALLOCATOR, HEAP)
                .childOption(ChannelOption.RCVBUF_ALLOCATOR, new HeapReads())
                .childOption(ChannelOption.TCP_NODELAY, true)
                .childHandler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    protected void initChannel(SocketChannel ch) {
                        Peer p = new Peer(ch);
                        ch.pipeline().addLast(p, new HttpServerCodec(new HttpDecoderConfig()
                                .setMaxInitialLineLength(MAX_REQUEST_LINE).setMaxHeaderSize(MAX_HEADERS)
                                .setMaxChunkSize(READ_BYTES).setHeadersFactory(DROPPED_HEADERS)), p.requests);
                    }
                });
    }

    private static String hostPort(InetSocketAddress a) {
        String host = a.getAddress().getHostAddress();
        return (host.contains(":") ? "[" + host + "]" : host) + ":" + a.getPort();
    }

    /** The address and port it listens on. */
    public InetSocketAddress address() {
        return (InetSocketAddress) listener.localAddress();
    }

    /** A connection's steps, each with its deadline. */
    private enum Step {
        /** accepted, nothing received yet ({@link #IDLE_MILLIS}) */
        CONNECTED,
        /** the request head under way ({@link #REQUEST_MILLIS}) */
        HEAD,
        /** its head complete, the answer being made or written ({@link #REQUEST_MILLIS}) */
        ANSWER,
        /** answered, output shut down, waiting for the peer to close ({@link #REQUEST_MILLIS}) */
        LINGER,
        /** closed: what the decoder still makes of the bytes it held is dropped */
        CLOSED
    }

    /** One connection, first in its pipeline (it sees the bytes as they arrive); everything on the event loop. */
    private final class Peer extends ChannelInboundHandlerAdapter {
        private final SocketChannel ch;
        private final Requests requests = new Requests();
        private Step step;
        private ScheduledFuture<?> deadline;

        Peer(SocketChannel ch) {
            this.ch = ch;
        }

        private void step(Step next, long millis) {
            step = next;
            if (deadline != null) {
                deadline.cancel(false);
            }
            deadline = ch.eventLoop().schedule(this::expired, millis, TimeUnit.MILLISECONDS);
        }

        private void expired() {
            if (step != Step.LINGER) {
                http.timedOut.incrementAndGet();
            }
            ch.close();
        }

        @Override
        public void channelActive(ChannelHandlerContext ctx) {
            http.accepted.incrementAndGet();
            http.open.incrementAndGet();
            peers.add(this);
            step(Step.CONNECTED, IDLE_MILLIS);
            if (peers.size() > MAX_CONNECTIONS) {
                evictFor(this);
            }
            ctx.fireChannelActive();
        }

        @Override
        public void channelInactive(ChannelHandlerContext ctx) {
            peers.remove(this);
            http.open.decrementAndGet();
            step = Step.CLOSED;
            if (deadline != null) {
                deadline.cancel(false);
            }
            ctx.fireChannelInactive();
        }

        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            if (step == Step.LINGER || step == Step.CLOSED) {
                ReferenceCountUtil.release(msg);
                return;
            }
            if (step == Step.CONNECTED) {
                step(Step.HEAD, REQUEST_MILLIS);
            }
            ctx.fireChannelRead(msg);
        }

        /** Sends the one answer, then shuts output down and lingers until the peer closes. */
        void reply(int code, byte[] body, String type, boolean head, String allow, Runnable done) {
            FullHttpResponse res = new DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.valueOf(code),
                    head ? Unpooled.EMPTY_BUFFER : Unpooled.wrappedBuffer(body));
            HttpHeaders h = res.headers();
            h.set(HttpHeaderNames.CONTENT_TYPE, type);
            h.setInt(HttpHeaderNames.CONTENT_LENGTH, body.length);
            h.set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE);
            if (allow != null) {
                h.set(HttpHeaderNames.ALLOW, allow);
            }
            ch.writeAndFlush(res).addListener(f -> {
                if (done != null) {
                    done.run();
                }
                if (!f.isSuccess() || step != Step.ANSWER) {
                    ch.close();
                    return;
                }
                step(Step.LINGER, REQUEST_MILLIS);
                ch.shutdownOutput();
                ch.config().setAutoRead(true);
            });
        }

        void reply(int code, String body, boolean head) {
            reply(code, body.getBytes(StandardCharsets.UTF_8), TEXT, head, null, null);
        }

        /** After the codec: the request's head, answered at once; whatever follows it is dropped. */
        private final class Requests extends SimpleChannelInboundHandler<HttpObject> {
            @Override
            protected void channelRead0(ChannelHandlerContext ctx, HttpObject o) {
                if (o instanceof HttpRequest r && step == Step.HEAD) {
                    step(Step.ANSWER, REQUEST_MILLIS);
                    ch.config().setAutoRead(false);
                    answer(Peer.this, r);
                }
            }

            @Override
            public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
                ctx.close(); // a connection reset, say: nothing to tell anyone
            }
        }
    }

    /** Closes the oldest connection not being answered (else the oldest) to make room for {@code newest}. */
    private void evictFor(Peer newest) {
        Peer victim = null;
        for (Peer p : peers) {
            if (p == newest) {
                continue;
            }
            if (p.step != Step.ANSWER) {
                victim = p;
                break;
            }
            if (victim == null) {
                victim = p;
            }
        }
        peers.remove(victim);
        http.evicted.incrementAndGet();
        victim.ch.close();
    }

    private void answer(Peer p, HttpRequest r) {
        if (r.decoderResult().isFailure()) {
            p.reply(400, "bad request: not an HTTP/1.x request head of at most " + MAX_REQUEST_LINE
                    + " bytes of request line and " + MAX_HEADERS + " of headers (send GET or HEAD of " + PATHS
                    + ")\n", false);
            return;
        }
        String method = r.method().name();
        boolean head = "HEAD".equals(method);
        if (!head && !"GET".equals(method)) {
            p.reply(405, ("method not allowed: " + method + " (GET or HEAD only)\n").getBytes(StandardCharsets.UTF_8),
                    TEXT, false, "GET, HEAD", null);
            return;
        }
        String path;
        try {
            path = URI.create(r.uri()).getPath();
        } catch (IllegalArgumentException e) {
            p.reply(400, "bad request: not a URI path: send GET or HEAD of " + PATHS + "\n", head);
            return;
        }
        String target = path == null ? r.uri() : path;
        switch (target) {
            case "/metrics" -> scrape(p, head);
            case "/ready" -> {
                DaemonState s = daemon.state();
                p.reply(s == DaemonState.READY ? 200 : 503, s == DaemonState.READY ? "ready\n" : s.wireName() + "\n",
                        head);
            }
            case "/live" -> {
                double age = daemon.heartbeatAgeSeconds();
                boolean live = age < LIVE_STALE_SECONDS;
                p.reply(live ? 200 : 503, live ? "live\n" : String.format(Locale.ROOT,
                        "stale: the poll loop last went round %.1f s ago\n", age), head);
            }
            default -> p.reply(404, "not found: " + target + " " + PATHS + "\n", head);
        }
    }

    /** /metrics: the page made on the scrape thread, sent from the event loop. */
    private void scrape(Peer p, boolean head) {
        if (scraping >= MAX_SCRAPES) {
            p.reply(503, "busy: " + MAX_SCRAPES + " /metrics answers already under way; scrape again\n", head);
            return;
        }
        scraping++;
        Runnable done = () -> scraping--;
        try {
            scrapes.execute(() -> {
                byte[] page;
                String error = null;
                try {
                    ByteArrayOutputStream out = new ByteArrayOutputStream(8192);
                    WRITER.write(out, registry.scrape());
                    page = out.toByteArray();
                } catch (IOException | RuntimeException e) {
                    page = null;
                    error = "metrics: cannot write the page: " + e + " (report it)\n";
                }
                byte[] body = page;
                String failed = error;
                try {
                    p.ch.eventLoop().execute(() -> {
                        if (failed != null) {
                            p.reply(500, failed.getBytes(StandardCharsets.UTF_8), TEXT, head, null, done);
                        } else {
                            p.reply(200, body, CONTENT_TYPE, head, null, done);
                        }
                    });
                } catch (RejectedExecutionException e) {
                    // the server is closing: every connection goes with it
                }
            });
        } catch (RejectedExecutionException e) {
            done.run();
            p.ch.close();
        }
    }

    /**
     * The headers of a request as the decoder makes them: every header parsed and dropped. Only the request line is
     * needed, so a head of many small headers costs no more than the one line being read.
     */
    private static final HttpHeadersFactory DROPPED_HEADERS = new HttpHeadersFactory() {
        @Override
        public HttpHeaders newHeaders() {
            return new DefaultHttpHeaders() {
                @Override
                public HttpHeaders add(String name, Object value) {
                    return this;
                }

                @Override
                public HttpHeaders add(CharSequence name, Object value) {
                    return this;
                }
            };
        }

        @Override
        public HttpHeaders newEmptyHeaders() {
            return newHeaders();
        }
    };

    /** Reads of {@link #READ_BYTES} into heap buffers: Netty's own reads would take direct memory. */
    private static final class HeapReads extends DefaultMaxMessagesRecvByteBufAllocator {
        @SuppressWarnings("deprecation")
        @Override
        public Handle newHandle() {
            return new MaxMessageHandle() {
                @Override
                public ByteBuf allocate(ByteBufAllocator alloc) {
                    return alloc.heapBuffer(READ_BYTES);
                }

                @Override
                public int guess() {
                    return READ_BYTES;
                }
            };
        }
    }

    /**
     * Netty logs through java.util.logging (set here before any of its classes looks for SLF4J), whose records for
     * io.netty go to System.Logger, one line each, message and error.
     */
    private static Logger nettyLog() {
        InternalLoggerFactory.setDefaultFactory(JdkLoggerFactory.INSTANCE);
        Logger l = Logger.getLogger("io.netty");
        l.setUseParentHandlers(false);
        l.setLevel(Level.INFO);
        l.addHandler(new Handler() {
            @Override
            public void publish(LogRecord r) {
                int severity = r.getLevel().intValue();
                System.getLogger(r.getLoggerName()).log(severity >= Level.SEVERE.intValue() ? System.Logger.Level.ERROR
                        : severity >= Level.WARNING.intValue() ? System.Logger.Level.WARNING : System.Logger.Level.INFO,
                        r.getMessage() + (r.getThrown() == null ? "" : ": " + r.getThrown()));
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        });
        return l;
    }

    /** Stops listening, closes every HTTP connection at once and ends its threads. */
    @Override
    public void close() {
        scrapes.shutdownNow();
        loop.shutdownGracefully(0, 0, TimeUnit.MILLISECONDS).awaitUninterruptibly(10, TimeUnit.SECONDS);
        boolean interrupted = false;
        try {
            scrapes.awaitTermination(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            interrupted = true;
        }
        List<Thread> all;
        synchronized (threads) {
            all = List.copyOf(threads);
        }
        for (Thread t : all) {
            try {
                t.join(10_000);
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
