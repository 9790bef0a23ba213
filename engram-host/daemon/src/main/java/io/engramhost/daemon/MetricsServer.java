package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ProtocolDescriptor;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

/**
 * {@code serve --metrics-port}: a small HTTP server (the JDK's {@code com.sun.net.httpserver}) for
 * Prometheus and for probes. {@code /metrics} (text format 0.0.4, written by the Prometheus client library's
 * {@link PrometheusTextFormatWriter} from this daemon's own registry, {@link DaemonMetrics}), {@code /ready} (200
 * only when ready),
 * {@code /live} (200 while the poll loop goes round). GET and HEAD only, no request body is read, nothing
 * it receives changes the daemon. Every request is answered on the server's own dispatcher thread, from
 * the objects STATUS reads: it takes no lock the poll loop or the workers hold, so a slow HTTP client can
 * delay other HTTP answers but never an import. A connection that sends nothing costs no thread; one that
 * trickles a request holds the dispatcher until the JDK's request deadline, set here (unless already set)
 * to {@link #REQUEST_SECONDS}, drops it.
 */
public final class MetricsServer implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(MetricsServer.class.getName());
    /** /live fails once the poll loop has not gone round for this long (it goes round at least every second). */
    static final long LIVE_STALE_SECONDS = 10;
    /** The JDK server's deadline for a request's headers and for an answer to be taken. */
    static final int REQUEST_SECONDS = 2;
    private static final int BACKLOG = 16;
    private static final PrometheusTextFormatWriter WRITER = PrometheusTextFormatWriter.create();
    /** {@code text/plain; version=0.0.4; charset=utf-8} */
    static final String CONTENT_TYPE = WRITER.getContentType();

    private final HttpServer server;
    private final DaemonMetrics.Observed daemon;
    private final PrometheusRegistry registry;

    private MetricsServer(HttpServer server, DaemonMetrics.Observed daemon, PrometheusRegistry registry) {
        this.server = server;
        this.daemon = daemon;
        this.registry = registry;
    }

    /** How long a successor retries binding the port its predecessor frees as it exits. */
    static final long AFTER_HANDOVER_RETRY_MILLIS = 10_000;

    /**
     * Binds {@code context}'s metrics address and port and starts answering; a port in use fails with one line naming
     * it, after {@code retryMillis} of retries (a successor's predecessor frees the port as it exits: the JDK's HTTP
     * server cannot adopt a socket another process hands over).
     */
    static MetricsServer start(DaemonMetrics.Observed daemon, DaemonContext context, long retryMillis) {
        long deadline = System.nanoTime() + retryMillis * 1_000_000L;
        String protocol = ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION;
        while (true) {
            try {
                return start(daemon, context.metricsAddress(), context.metricsPort(), context.buildVersion(),
                        context.buildCommit(), protocol);
            } catch (RuntimeException e) {
                if (System.nanoTime() >= deadline) {
                    throw e;
                }
                try {
                    Thread.sleep(20);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw e;
                }
            }
        }
    }

    /** Binds {@code address:port} and starts answering; a port in use fails with one line naming it. */
    private static MetricsServer start(DaemonMetrics.Observed daemon, InetAddress address, int port, String version, String commit,
            String protocol) {
        System.setProperty("sun.net.httpserver.maxReqTime", System.getProperty("sun.net.httpserver.maxReqTime",
                Integer.toString(REQUEST_SECONDS)));
        System.setProperty("sun.net.httpserver.maxRspTime", System.getProperty("sun.net.httpserver.maxRspTime",
                Integer.toString(REQUEST_SECONDS)));
        System.setProperty("sun.net.httpserver.maxIdleConnections", System.getProperty(
                "sun.net.httpserver.maxIdleConnections", "32"));
        InetSocketAddress where = new InetSocketAddress(address, port);
        HttpServer server;
        try {
            server = HttpServer.create(where, BACKLOG);
        } catch (BindException e) {
            throw new IllegalStateException("cannot listen on " + hostPort(where) + " (--metrics-port): " + e.getMessage());
        } catch (IOException e) {
            throw new IllegalStateException("cannot listen on " + hostPort(where) + " (--metrics-port): " + e);
        }
        MetricsServer m = new MetricsServer(server, daemon, DaemonMetrics.registry(daemon,
                new DaemonMetrics.BuildInfo(version, commit, protocol)));
        server.createContext("/", m::handle);
        server.setExecutor(null); // every exchange on the server's one dispatcher thread
        server.start();
        LOG.log(INFO, "metrics and health on http://" + hostPort(server.getAddress()) + "/ (/metrics, /ready, /live)");
        return m;
    }

    private static String hostPort(InetSocketAddress a) {
        String host = a.getAddress().getHostAddress();
        return (host.contains(":") ? "[" + host + "]" : host) + ":" + a.getPort();
    }

    /** The address and port it listens on. */
    public InetSocketAddress address() {
        return server.getAddress();
    }

    private void handle(HttpExchange x) throws IOException {
        try (x) {
            String method = x.getRequestMethod();
            boolean head = "HEAD".equals(method);
            if (!head && !"GET".equals(method)) {
                x.getResponseHeaders().set("Allow", "GET, HEAD");
                reply(x, 405, "method not allowed: " + method + " (GET or HEAD only)\n", false);
                return;
            }
            switch (x.getRequestURI().getPath()) {
                case "/metrics" -> {
                    x.getResponseHeaders().set("Content-Type", CONTENT_TYPE);
                    ByteArrayOutputStream page = new ByteArrayOutputStream(8192);
                    WRITER.write(page, registry.scrape());
                    reply(x, 200, page.toByteArray(), head);
                }
                case "/ready" -> {
                    DaemonState s = daemon.state();
                    reply(x, s == DaemonState.READY ? 200 : 503, s == DaemonState.READY ? "ready\n" : s.wireName() + "\n",
                            head);
                }
                case "/live" -> {
                    double age = heartbeatAgeSeconds();
                    boolean live = age < LIVE_STALE_SECONDS;
                    reply(x, live ? 200 : 503, live ? "live\n" : String.format(java.util.Locale.ROOT,
                            "stale: the poll loop last went round %.1f s ago\n", age), head);
                }
                default -> reply(x, 404, "not found: " + x.getRequestURI().getPath() + " (/metrics, /ready, /live)\n",
                        head);
            }
        }
    }

    private double heartbeatAgeSeconds() {
        return DaemonMetrics.heartbeatAgeSeconds(daemon);
    }

    private static void reply(HttpExchange x, int code, String body, boolean head) throws IOException {
        reply(x, code, body.getBytes(StandardCharsets.UTF_8), head);
    }

    private static void reply(HttpExchange x, int code, byte[] b, boolean head) throws IOException {
        if (!x.getResponseHeaders().containsKey("Content-Type")) {
            x.getResponseHeaders().set("Content-Type", "text/plain; charset=utf-8");
        }
        if (head) {
            x.getResponseHeaders().set("Content-Length", Integer.toString(b.length));
            x.sendResponseHeaders(code, -1);
            return;
        }
        x.sendResponseHeaders(code, b.length);
        try (OutputStream out = x.getResponseBody()) {
            out.write(b);
        }
    }

    /** Stops listening and closes every HTTP connection at once. */
    @Override
    public void close() {
        server.stop(0);
    }
}
