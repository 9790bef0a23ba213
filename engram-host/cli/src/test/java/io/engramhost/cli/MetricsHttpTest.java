package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.cli.testing.EnvGateHooks;
import io.engramhost.cli.testing.TestJvm;
import io.engramhost.json.JsonReader;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --metrics-port}: /metrics (written by the Prometheus client library), /ready and /live over HTTP
 * from a daemon process, during a load held
 * by the test gate ({@link EnvGateHooks#LOAD_GATE}) and once ready. The exposition format is parsed
 * strictly, and the values are checked against STATUS.
 */
@Timeout(120)
class MetricsHttpTest {
    /** A sample line: name, optional labels, value (the format's float, or +Inf, -Inf, NaN). */
    private static final Pattern SAMPLE = Pattern.compile(
            "([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{(?:[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\\\\n]|\\\\[\\\\\"n])*\""
                    + "(?:,[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\\\\n]|\\\\[\\\\\"n])*\")*)?\\})? "
                    + "(-?[0-9]+(?:\\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|\\+Inf|-Inf|NaN)");
    private static final Pattern LABEL = Pattern.compile("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\"");
    private static final Pattern COMMENT = Pattern.compile("# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)");

    record Http(int code, String body, Map<String, String> headers) {
    }

    /** One parsed page: every sample by name and labels, e.g. {@code engram_host_tables{backend="memfd"}}. */
    record Page(Map<String, Double> samples, Map<String, String> types) {
        double get(String name, String... kv) {
            Double v = samples.get(key(name, kv));
            if (v == null) {
                throw new AssertionError("no sample " + key(name, kv) + " in " + samples.keySet());
            }
            return v;
        }

        /** A histogram's {@code _bucket} samples by their {@code le} bound, as numbers. */
        java.util.TreeMap<Double, Double> buckets(String histogram) {
            java.util.TreeMap<Double, Double> out = new java.util.TreeMap<>();
            Matcher m = Pattern.compile(Pattern.quote(histogram + "_bucket") + "\\{le=(.*)\\}").matcher("");
            samples.forEach((k, v) -> {
                if (m.reset(k).matches()) {
                    String le = m.group(1);
                    assertEquals(null, out.put(le.equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(le), v),
                            "bucket twice: " + k);
                }
            });
            return out;
        }

        static String key(String name, String... kv) {
            Map<String, String> m = new java.util.TreeMap<>();
            for (int i = 0; i < kv.length; i += 2) {
                m.put(kv[i], kv[i + 1]);
            }
            return name + m;
        }
    }

    @Test
    void shouldServeMetricsReadyAndLiveDuringTheLoadAndOnceReady(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 14),
                1000, 64, 5));
        Path socket = dir.resolve("run/m.sock");
        Path log = dir.resolve("d.log");
        Path gate = dir.resolve("gate");
        int port = freePort();
        ProcessBuilder pb = new ProcessBuilder(TestJvm.command("serve", "--socket", socket.toString(), "--numa", "none",
                "--threads", "1", "--checkpoint", index.toString(), "--metrics-port", Integer.toString(port)))
                .redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().put(EnvGateHooks.LOAD_GATE, "before-read:" + gate);
        Process daemon = pb.start();
        Process holder = null;
        List<Socket> idle = new ArrayList<>();
        try {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!Files.readString(log).contains("TEST ONLY (" + EnvGateHooks.LOAD_GATE)) {
                assertTrue(daemon.isAlive() && System.nanoTime() < deadline, "never held: " + Files.readString(log));
                Thread.sleep(10);
            }
            // Loading: the port answers, /ready says so, /live passes.
            Page loading = parse(get(port, "GET", "/metrics"));
            assertEquals(0, loading.get("engram_host_ready"));
            assertEquals(1, loading.get("engram_host_state", "state", "loading"));
            assertEquals(0, loading.get("engram_host_state", "state", "ready"));
            assertTrue(loading.get("engram_host_uptime_seconds") > 0);
            assertFalse(loading.samples().containsKey("engram_host_served_bytes{}"), "no tables before ready");
            assertEquals(new Http(503, "loading\n", Map.of()).body(), get(port, "GET", "/ready").body());
            assertEquals(503, get(port, "GET", "/ready").code());
            Http live = get(port, "GET", "/live");
            assertEquals(200, live.code(), live.body());
            assertEquals("live\n", live.body());
            assertEquals(404, get(port, "GET", "/nothing").code());
            Http post = get(port, "POST", "/metrics");
            assertEquals(405, post.code());
            assertEquals("GET, HEAD", post.headers().get("allow"));
            Http head = get(port, "HEAD", "/ready");
            assertEquals(503, head.code());
            assertEquals("", head.body());
            assertEquals("8", head.headers().get("content-length"), "HEAD: the length GET's 'loading\\n' has");
            assertHttpContract(port);

            Files.createFile(gate);
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!String.valueOf(daemon.pid()).equals(ReadyFile.read(SocketPaths.readyFile(socket)).get("pid"))) {
                assertTrue(daemon.isAlive() && System.nanoTime() < deadline, "not ready: " + Files.readString(log));
                Thread.sleep(20);
            }
            Http ready = get(port, "GET", "/ready");
            assertEquals(200, ready.code(), ready.body());
            assertEquals("ready\n", ready.body());
            assertEquals(200, get(port, "HEAD", "/ready").code());

            // A client process holds a lease; the page agrees with STATUS.
            holder = new ProcessBuilder(ChildJvm.command("import", "--socket", socket.toString(), "--hold-ms", "60000"))
                    .redirectErrorStream(true).redirectOutput(dir.resolve("holder.log").toFile()).start();
            Page p;
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while ((p = parse(get(port, "GET", "/metrics"))).get("engram_host_leases") < 1) {
                assertTrue(holder.isAlive() && System.nanoTime() < deadline, "no lease: "
                        + Files.readString(dir.resolve("holder.log")));
                Thread.sleep(50);
            }
            CliRun status = CliRun.of("status", "--json", "--socket", socket.toString());
            assertEquals(0, status.exit(), status.err());
            @SuppressWarnings("unchecked")
            Map<String, Object> s = (Map<String, Object>) JsonReader.parse(status.out());
            p = parse(get(port, "GET", "/metrics"));
            assertEquals(1, p.get("engram_host_ready"));
            assertEquals(1, p.get("engram_host_state", "state", "ready"));
            assertEquals(((List<?>) s.get("leases")).size(), (int) p.get("engram_host_leases"));
            assertEquals(1, (int) p.get("engram_host_leases"));
            assertEquals(((Number) s.get("bytes")).doubleValue(), p.get("engram_host_served_bytes"));
            assertEquals(((Number) s.get("regions")).doubleValue(), p.get("engram_host_regions"));
            List<?> tables = (List<?>) s.get("tables");
            assertEquals(4, tables.size());
            double sum = 0;
            for (Object o : tables) {
                Map<?, ?> t = (Map<?, ?>) o;
                double bytes = p.get("engram_host_table_bytes", "table", (String) t.get("name"), "backend",
                        (String) t.get("backend"), "numa_node", String.valueOf(t.get("numa_node")), "device",
                        String.valueOf(t.get("device")));
                assertEquals(((Number) t.get("bytes")).doubleValue(), bytes);
                sum += bytes;
            }
            assertEquals(sum, p.get("engram_host_resident_bytes", "backend", "memfd", "numa_node",
                    String.valueOf(((Map<?, ?>) tables.get(0)).get("numa_node")), "device", "-1"));
            assertEquals(4, p.get("engram_host_tables", "backend", "memfd", "numa_node",
                    String.valueOf(((Map<?, ?>) tables.get(0)).get("numa_node")), "device", "-1"));
            assertEquals(0, p.get("engram_host_table_series_omitted"));
            assertEquals(1, p.get("engram_host_imports_total"));
            assertEquals(((Number) ((Map<?, ?>) s.get("imports")).get("served")).doubleValue(),
                    p.get("engram_host_imports_total"));
            assertEquals(0, p.get("engram_host_import_errors_total", "code", "NOT_READY"));
            // the one import served so far, in the latency histogram: counted in +Inf and in _count, with a duration
            assertEquals("histogram", p.types().get("engram_host_import_duration_seconds"));
            assertEquals(1, p.get("engram_host_import_duration_seconds_bucket", "le", "+Inf"));
            assertEquals(1, p.get("engram_host_import_duration_seconds_count"));
            assertTrue(p.get("engram_host_import_duration_seconds_sum") > 0);
            // the buckets docs/operator-reference.md lists, by value (the library writes le as Java doubles: 5.0E-4, 10.0),
            // cumulative, ending at the count
            java.util.TreeMap<Double, Double> buckets = p.buckets("engram_host_import_duration_seconds");
            assertEquals(List.of(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    Double.POSITIVE_INFINITY), List.copyOf(buckets.keySet()));
            double previous = 0;
            for (double cumulative : buckets.values()) {
                assertTrue(cumulative >= previous, "cumulative: " + buckets);
                previous = cumulative;
            }
            assertEquals(0, p.get("engram_host_hugepage_coverage_ratio")); // memfd: no huge pages
            Map<?, ?> conn = (Map<?, ?>) s.get("connections");
            assertEquals(((Number) conn.get("bad_requests")).doubleValue(), p.get("engram_host_bad_requests_total"));
            assertEquals(((Number) conn.get("timed_out")).doubleValue(), p.get("engram_host_connections_timed_out_total"));
            assertTrue(p.get("engram_host_connections_open") >= 1);
            Map<?, ?> load = (Map<?, ?>) s.get("load");
            assertEquals(((Number) load.get("read_s")).doubleValue(), p.get("engram_host_load_phase_seconds", "phase",
                    "read"), 1e-6);
            assertEquals("counter", p.types().get("engram_host_imports_total"));
            assertEquals("gauge", p.types().get("engram_host_leases"));
            String version = CliRun.of("--version").out().strip();
            Matcher vm = Pattern.compile("engram-host (\\S+) \\(commit (\\S+), protocol (\\S+)\\)").matcher(version);
            assertTrue(vm.matches(), version);
            assertEquals(1, p.get("engram_host_build_info", "version", vm.group(1), "commit", vm.group(2), "protocol",
                    vm.group(3)));

            // 20 HTTP connections that send nothing, and one that sends half a request, stop no import.
            for (int i = 0; i < 20; i++) {
                Socket c = new Socket();
                c.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 5000);
                idle.add(c);
            }
            Socket trickle = new Socket(InetAddress.getLoopbackAddress(), port);
            idle.add(trickle);
            trickle.getOutputStream().write("GET /metr".getBytes(StandardCharsets.US_ASCII));
            trickle.getOutputStream().flush();
            long t0 = System.nanoTime();
            CliRun imported = CliRun.of("import", "--socket", socket.toString());
            assertEquals(0, imported.exit(), imported.out() + imported.err());
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(30));
            Page after = parse(get(port, "GET", "/metrics"));
            assertEquals(2, after.get("engram_host_imports_total"));
            assertEquals(200, get(port, "GET", "/live").code());
        } finally {
            for (Socket c : idle) {
                c.close();
            }
            if (holder != null) {
                holder.destroyForcibly();
            }
            daemon.destroy();
            if (!daemon.waitFor(20, TimeUnit.SECONDS)) {
                daemon.destroyForcibly();
            }
        }
    }

    /** A successor of a takeover binds the port its predecessor frees as it exits, and answers on it. */
    @Test
    void shouldMoveTheMetricsPortToTheSuccessorOfATakeover(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 100,
                64, 3));
        Path socket = dir.resolve("run/t.sock");
        int port = freePort();
        String[] args = {"--checkpoint", index.toString(), "--metrics-port", Integer.toString(port)};
        try (DaemonProcess a = DaemonProcess.start(socket, dir.resolve("a.log"), args).awaitReady()) {
            assertEquals(200, get(port, "GET", "/ready").code());
            List<String> more = new ArrayList<>(List.of(args));
            more.add("--takeover");
            try (DaemonProcess b = DaemonProcess.start(socket, dir.resolve("b.log"), more.toArray(String[]::new))
                    .awaitReady()) {
                assertTrue(a.process.waitFor(60, TimeUnit.SECONDS), "the predecessor exits: " + a.log());
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (!b.log().contains("metrics and health on http://127.0.0.1:" + port + "/")) {
                    assertTrue(b.process.isAlive() && System.nanoTime() < deadline, b.log());
                    Thread.sleep(20);
                }
                assertEquals("ready\n", get(port, "GET", "/ready").body());
                assertEquals(200, get(port, "GET", "/live").code());
                assertEquals(1, parse(get(port, "GET", "/metrics")).get("engram_host_ready"));
            }
        }
    }

    @Test
    void shouldRefuseToServeWhenTheMetricsPortIsInUse(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 100,
                64, 3));
        Path socket = dir.resolve("run/p.sock");
        try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            CliRun serve = CliRun.of("serve", "--socket", socket.toString(), "--numa", "none", "--checkpoint",
                    index.toString(), "--metrics-port", Integer.toString(taken.getLocalPort()));
            assertEquals(1, serve.exit(), serve.out() + serve.err());
            List<String> errors = serve.err().lines().filter(l -> l.startsWith("engram-host serve:")).toList();
            assertEquals(List.of("engram-host serve: cannot listen on 127.0.0.1:" + taken.getLocalPort()
                    + " (--metrics-port): Address already in use: another process listens on that port (ss -ltnp"
                    + " shows which): stop it, or give --metrics-port another port"), errors, serve.err());
            assertFalse(serve.err().contains("loading"), "refused before the load: " + serve.err());
            assertFalse(Files.exists(socket), "socket removed");
            assertFalse(Files.exists(SocketPaths.readyFile(socket)));
        }
    }

    /**
     * What every answer keeps, whatever the request: one request a connection (HTTP/1.1 asked to keep it alive too), the
     * content type, HEAD's length without a body, a query ignored, a body announced but not sent answered at once
     * (405 for POST, with Allow), a head that is not HTTP or over the limits a 400, and the port's own counters.
     */
    private static void assertHttpContract(int port) throws IOException {
        Http live = exchange(port, "GET /live?verbose=1 HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n");
        assertEquals(200, live.code(), live.body());
        assertEquals("live\n", live.body());
        assertEquals("close", live.headers().get("connection"));
        assertEquals("text/plain; charset=utf-8", live.headers().get("content-type"));
        assertEquals("5", live.headers().get("content-length"));
        Http metricsHead = get(port, "HEAD", "/metrics");
        assertEquals(200, metricsHead.code());
        assertEquals("", metricsHead.body());
        assertEquals("text/plain; version=0.0.4; charset=utf-8", metricsHead.headers().get("content-type"));
        assertTrue(Integer.parseInt(metricsHead.headers().get("content-length")) > 1000, metricsHead.headers()::toString);
        Http missing = get(port, "HEAD", "/nothing");
        assertEquals(404, missing.code());
        assertEquals("", missing.body());
        assertEquals("not found: /nothing (/metrics, /ready, /live)\n", get(port, "GET", "/nothing").body());
        long t0 = System.nanoTime();
        Http post = exchange(port, "POST /live HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\nsome of it");
        assertEquals(405, post.code());
        assertEquals("GET, HEAD", post.headers().get("allow"));
        assertEquals("method not allowed: POST (GET or HEAD only)\n", post.body());
        Http bodied = exchange(port, "GET /live HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\n");
        assertEquals(200, bodied.code());
        assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(1), "answered without waiting for the body");
        Http garbage = exchange(port, "\u0001\u0002 not http at all\r\n\r\n");
        assertEquals(400, garbage.code(), garbage.body());
        Http longLine = exchange(port, "GET /" + "a".repeat(2000) + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assertEquals(400, longLine.code(), longLine.body());
        assertEquals("bad request: not an HTTP/1.x request head of at most 1024 bytes of request line and 4096 of"
                + " headers (send GET or HEAD of (/metrics, /ready, /live))\n", longLine.body());
        Http longHeaders = exchange(port, "GET /live HTTP/1.1\r\n" + "X-A: b\r\n".repeat(1000) + "\r\n");
        assertEquals(400, longHeaders.code(), longHeaders.body());
        Http manyHeaders = exchange(port, "GET /live HTTP/1.1\r\n" + "X-A: b\r\n".repeat(500) + "\r\n");
        assertEquals(200, manyHeaders.code(), "4000 bytes of headers are within the limit");
        Page p = parse(get(port, "GET", "/metrics"));
        assertTrue(p.get("engram_host_http_connections_accepted_total") >= 12, p.samples()::toString);
        assertTrue(p.get("engram_host_http_connections_open") >= 1, "this one");
        assertEquals(0, p.get("engram_host_http_connections_evicted_total"));
        assertEquals("counter", p.types().get("engram_host_http_connections_timed_out_total"));
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        }
    }

    /** One HTTP/1.0 request over a plain socket: status, body and headers (names lower-case). */
    private static Http get(int port, String method, String path) throws IOException {
        return exchange(port, method + " " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    }

    /** {@code request} sent as it is; the answer read to the end of the connection, which the daemon closes. */
    private static Http exchange(int port, String request) throws IOException {
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            s.setSoTimeout(20_000);
            OutputStream out = s.getOutputStream();
            out.write(request.getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            String all = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            int split = all.indexOf("\r\n\r\n");
            assertTrue(split > 0, "no header end: " + all);
            String[] headLines = all.substring(0, split).split("\r\n");
            Matcher status = Pattern.compile("HTTP/1\\.[01] (\\d{3}) .*").matcher(headLines[0]);
            assertTrue(status.matches(), headLines[0]);
            Map<String, String> headers = new HashMap<>();
            for (int i = 1; i < headLines.length; i++) {
                int c = headLines[i].indexOf(':');
                headers.put(headLines[i].substring(0, c).toLowerCase(java.util.Locale.ROOT), headLines[i].substring(c + 1)
                        .strip());
            }
            return new Http(Integer.parseInt(status.group(1)), all.substring(split + 4), headers);
        }
    }

    /**
     * Parses a /metrics answer strictly: 200, the 0.0.4 content type, every line a HELP or TYPE comment or a
     * sample, every sample's name announced by a TYPE line before it, no sample twice, a newline at the end.
     */
    private static Page parse(Http h) {
        assertEquals(200, h.code(), h.body());
        assertEquals("text/plain; version=0.0.4; charset=utf-8", h.headers().get("content-type"));
        assertTrue(h.body().endsWith("\n"), "ends with a newline");
        Map<String, Double> samples = new LinkedHashMap<>();
        Map<String, String> types = new HashMap<>();
        for (String line : h.body().split("\n", -1)) {
            if (line.isEmpty()) {
                continue;
            }
            Matcher c = COMMENT.matcher(line);
            if (line.startsWith("#")) {
                assertTrue(c.matches(), "bad comment: " + line);
                if (c.group(1).equals("TYPE")) {
                    assertTrue(List.of("gauge", "counter", "histogram").contains(c.group(3)), line);
                    assertTrue(c.group(2).startsWith("engram_host_"), line);
                    assertEquals(null, types.put(c.group(2), c.group(3)), "TYPE twice: " + line);
                }
                continue;
            }
            Matcher m = SAMPLE.matcher(line);
            assertTrue(m.matches(), "not a sample line: " + line);
            String name = m.group(1);
            // a histogram's samples are its name's _bucket, _sum and _count
            boolean histogramPart = "histogram".equals(types.get(name.replaceFirst("_(bucket|sum|count)$", "")));
            assertTrue(types.containsKey(name) || histogramPart, "sample before its TYPE: " + line);
            if ("counter".equals(types.get(name))) {
                assertTrue(name.endsWith("_total"), line);
            }
            List<String> kv = new ArrayList<>();
            if (m.group(2) != null) {
                Matcher l = LABEL.matcher(m.group(2));
                while (l.find()) {
                    kv.add(l.group(1));
                    kv.add(l.group(2).replace("\\n", "\n").replace("\\\"", "\"").replace("\\\\", "\\"));
                }
            }
            String key = Page.key(name, kv.toArray(String[]::new));
            double v = switch (m.group(3)) {
                case "+Inf" -> Double.POSITIVE_INFINITY;
                case "-Inf" -> Double.NEGATIVE_INFINITY;
                default -> Double.parseDouble(m.group(3));
            };
            assertEquals(null, samples.put(key, v), "sample twice: " + line);
        }
        assertTrue(types.containsKey("engram_host_build_info"), "build info");
        return new Page(samples, types);
    }
}
