package io.engramhost.daemon;

import io.engramhost.daemon.http.HttpStats;
import io.engramhost.daemon.http.MetricsServer;
import io.engramhost.daemon.loop.ConnectionStats;
import io.engramhost.daemon.loop.Leases;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.RegionKind;
import io.engramhost.seed.SeedStats;
import io.engramhost.store.Catalog;
import io.engramhost.store.LoadProgress;
import io.engramhost.store.LoadReport;
import io.engramhost.store.LoadTimings;
import io.engramhost.util.BuildInfo;
import io.prometheus.metrics.core.metrics.CounterWithCallback;
import io.prometheus.metrics.core.metrics.GaugeWithCallback;
import io.prometheus.metrics.core.metrics.Info;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.DoubleSupplier;
import java.util.function.ToDoubleFunction;

/**
 * The metrics of {@code /metrics}, as Prometheus client library metrics in a registry of this daemon's own (never
 * {@link PrometheusRegistry#defaultRegistry}: a JVM may run several daemons, the tests do). Every metric but the
 * import-latency histogram ({@link ImportLatency}) and the build's {@link Info} ({@link BuildInfo}) is a callback: a
 * scrape reads the daemon's live state, the same objects the STATUS document is built from ({@link StatusDocument}), never its JSON.
 * A callback that has nothing to say (no tables yet, no load timings yet) leaves its metric out of the page.
 * docs/operator-reference.md ("The metrics") lists every metric.
 */
final class DaemonMetrics {
    /** Per-table series stop here; past it only the aggregates by backend, NUMA node and device are written. */
    static final int MAX_TABLE_SERIES = 4096;
    private static final String[] GROUP_LABELS = {"backend", "numa_node", "device"};

    /** What the metrics read of the daemon, at each scrape (its state and heartbeat are the probes'). */
    interface Observed extends MetricsServer.Probes {
        double uptimeSeconds();

        LoadProgress progress();

        LoadReport report();

        /** The ready catalog (null before). */
        Catalog catalog();

        Leases leases();

        ConnectionStats stats();

        long requestMemoryUsed();

        /** The seed exporter's counts ({@code --seed-listen}; all 0 without it). */
        SeedStats seedStats();
    }

    private DaemonMetrics() {
    }

    /** A new registry holding every metric of {@code d}, and of the HTTP server that counts {@code http}. */
    static PrometheusRegistry registry(Observed d, HttpStats http) {
        PrometheusRegistry r = new PrometheusRegistry();
        Info.builder().name("engram_host_build_info")
                .help("The build: version, git commit and protocol versions; always 1.")
                .labelNames("version", "commit", "protocol").register(r)
                .setLabelValues(BuildInfo.version(), BuildInfo.commit(),
                        ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION);

        GaugeWithCallback.builder().name("engram_host_state")
                .help("1 for the daemon's state (loading, ready, stopping, failed), 0 for the others.")
                .labelNames("state").callback(cb -> {
                    DaemonState state = d.state();
                    for (DaemonState s : DaemonState.values()) {
                        cb.call(s == state ? 1 : 0, s.wireName());
                    }
                }).register(r);
        gauge(r, "engram_host_ready", "1 when every table is loaded and served, else 0.",
                () -> d.state() == DaemonState.READY ? 1 : 0);
        gauge(r, "engram_host_uptime_seconds", "Seconds since the daemon started.", d::uptimeSeconds);
        gauge(r, "engram_host_poll_loop_heartbeat_age_seconds",
                "Seconds since the connection poll loop last went round (it does at least every second).",
                d::heartbeatAgeSeconds);

        GaugeWithCallback.builder().name("engram_host_load_phase")
                .help("1 for the load's current phase (starting, ..., loaded).")
                .labelNames("phase").callback(cb -> cb.call(1, d.progress().phase())).register(r);
        gauge(r, "engram_host_load_bytes_done", "Bytes done in the load's current phase.",
                () -> d.progress().bytesDone());
        gauge(r, "engram_host_load_bytes_total", "Bytes the load's current phase has to do.",
                () -> d.progress().bytesTotal());
        GaugeWithCallback.builder().name("engram_host_load_phase_seconds")
                .help("Seconds the host tables' load spent per phase.")
                .labelNames("phase").callback(cb -> {
                    LoadTimings t = d.progress().loadTimings();
                    if (t != null) {
                        cb.call(t.createNanos() / 1e9, "create");
                        cb.call(t.readNanos() / 1e9, "read");
                        cb.call(t.verifySealNanos() / 1e9, "verify_seal");
                    }
                }).register(r);
        GaugeWithCallback.builder().name("engram_host_load_read_bytes")
                .help("Bytes the load read from the checkpoint.").callback(cb -> {
                    LoadTimings t = d.progress().loadTimings();
                    if (t != null) {
                        cb.call(t.readBytes());
                    }
                }).register(r);
        GaugeWithCallback.builder().name("engram_host_ready_seconds")
                .help("Seconds from the load's start to ready.").callback(cb -> {
                    Double ready = d.report().readySeconds();
                    if (ready != null) {
                        cb.call(ready);
                    }
                }).register(r);
        GaugeWithCallback.builder().name("engram_host_placement_pages")
                .help("Pages of the host tables verified on each NUMA node after load.")
                .labelNames("numa_node").callback(cb -> {
                    LoadReport.Placement placement = d.report().placement();
                    if (placement != null) {
                        placement.pagesByNode().forEach((node, pages) -> cb.call(pages, Integer.toString(node)));
                    }
                }).register(r);

        tables(r, d);

        gauge(r, "engram_host_leases", "Clients holding a lease (an import whose connection is still open).",
                () -> d.leases().size());
        ConnectionStats s = d.stats();
        gauge(r, "engram_host_connections_open", "Connections open on the Unix socket, leases included.",
                s::open);
        gauge(r, "engram_host_request_memory_used_bytes", "Bytes of unfinished requests held, all connections.",
                d::requestMemoryUsed);
        counter(r, "engram_host_connections_accepted_total", "Connections accepted on the Unix socket.",
                s::accepted);
        counter(r, "engram_host_connections_refused_busy_total", "Connections refused at a connection cap (BUSY).",
                s::refusedBusy);
        counter(r, "engram_host_connections_refused_not_allowed_total", "Connections refused: uid not admitted.",
                s::refusedNotAllowed);
        counter(r, "engram_host_connections_evicted_total", "Connections evicted at a cap.", s::evicted);
        counter(r, "engram_host_connections_timed_out_total", "Connections ended by a deadline.", s::timedOut);
        counter(r, "engram_host_bad_requests_total", "Malformed requests (BAD_REQUEST).", s::badRequests);
        counter(r, "engram_host_imports_total", "Imports served: manifests sent with their fds.",
                s::importsServed);
        CounterWithCallback.builder().name("engram_host_import_errors_total").help("Imports refused, by error code.")
                .labelNames("code").callback(cb -> {
                    for (ErrorCode code : ConnectionStats.IMPORT_ERRORS) {
                        cb.call(s.importErrors(code), code.name());
                    }
                }).register(r);
        s.importLatency().registerIn(r);
        SeedStats seed = d.seedStats();
        GaugeWithCallback.builder().name("engram_host_seed_received_bytes")
                .help("Verified bytes of the host tables this daemon's load took from each peer (--seed-from).")
                .labelNames("peer").callback(cb -> {
                    LoadReport.Origin o = d.report().origin();
                    if (o != null && o.seeded() != null) {
                        o.seeded().sources().forEach(src -> cb.call(src.bytes(), src.peer()));
                    }
                }).register(r);
        GaugeWithCallback.builder().name("engram_host_seed_peers_skipped")
                .help("Peers this daemon's load refused (no key, another checkpoint, a table whose digest differed).")
                .callback(cb -> {
                    LoadReport.Origin o = d.report().origin();
                    if (o != null && o.seeded() != null) {
                        cb.call(o.seeded().peersRefused());
                    }
                }).register(r);
        counter(r, "engram_host_seed_sent_bytes_total", "Table bytes sent to peers (--seed-listen).",
                seed::bytesSent);
        counter(r, "engram_host_seed_ranges_total", "Ranges sent to peers (--seed-listen).",
                seed::rangesSent);
        gauge(r, "engram_host_seed_peers", "Peers connected to the seed port now (--seed-listen).",
                seed::open);
        CounterWithCallback.builder().name("engram_host_seed_peers_refused_total")
                .help("Connections to the seed port refused, by reason (not-authenticated, bad-request, busy,"
                        + " timed-out, not-ready).")
                .labelNames("reason").callback(cb -> seed.refused().forEach((k, v) -> cb.call(v, k)))
                .register(r);

        gauge(r, "engram_host_http_connections_open", "Connections open on the metrics port.", http::open);
        counter(r, "engram_host_http_connections_accepted_total", "Connections accepted on the metrics port.",
                http::accepted);
        counter(r, "engram_host_http_connections_evicted_total",
                "Connections on the metrics port closed at its connection cap, oldest first.", http::evicted);
        counter(r, "engram_host_http_connections_timed_out_total",
                "Connections on the metrics port closed by a deadline (idle, request head or answer).",
                http::timedOut);
        return r;
    }

    private static void tables(PrometheusRegistry r, Observed d) {
        onCatalog(r, d, "engram_host_regions", "Regions (fds) the daemon holds.", c -> c.regionCount());
        onCatalog(r, d, "engram_host_served_bytes", "Bytes of every table served, together (STATUS bytes).",
                c -> c.totalBytes());
        groups(r, d, "engram_host_tables", "Tables served, by backend, NUMA node and device (-1: none).", 0);
        groups(r, d, "engram_host_resident_bytes", "Bytes of the tables served, by backend, NUMA node and device.", 1);
        onCatalog(r, d, "engram_host_hugepage_coverage_ratio",
                "Share of the host tables' bytes in huge pages (memfd-hugetlb regions); 0 with no host table.", c -> {
                    long host = 0;
                    long huge = 0;
                    for (Manifest.Table t : c.allTables()) {
                        if (t.device() < 0) {
                            host += t.bytes();
                            huge += t.kind() == RegionKind.MEMFD_HUGETLB ? t.bytes() : 0;
                        }
                    }
                    return host == 0 ? 0 : (double) huge / host;
                });
        onCatalog(r, d, "engram_host_table_series_omitted",
                "Tables left out of engram_host_table_bytes (past " + MAX_TABLE_SERIES + " tables).",
                c -> Math.max(0, c.allTables().size() - MAX_TABLE_SERIES));
        GaugeWithCallback.builder().name("engram_host_table_bytes")
                .help("Bytes of one table (the first " + MAX_TABLE_SERIES + " tables only).")
                .labelNames("table", "backend", "numa_node", "device").callback(cb -> {
                    Catalog c = d.catalog();
                    if (c == null) {
                        return;
                    }
                    List<Manifest.Table> all = c.allTables();
                    for (int i = 0; i < Math.min(all.size(), MAX_TABLE_SERIES); i++) {
                        Manifest.Table t = all.get(i);
                        cb.call(t.bytes(), t.name(), t.kind().backend(), Integer.toString(t.numaNode()),
                                Integer.toString(t.device()));
                    }
                }).register(r);
    }

    /** A gauge by backend, NUMA node and device: the tables' count ({@code which} 0) or their bytes (1). */
    private static void groups(PrometheusRegistry r, Observed d, String name, String help, int which) {
        GaugeWithCallback.builder().name(name).help(help).labelNames(GROUP_LABELS).callback(cb -> {
            Catalog c = d.catalog();
            if (c == null) {
                return;
            }
            Map<List<String>, long[]> groups = new TreeMap<>(DaemonMetrics::compareLabels);
            for (Manifest.Table t : c.allTables()) {
                long[] g = groups.computeIfAbsent(List.of(t.kind().backend(), Integer.toString(t.numaNode()),
                        Integer.toString(t.device())), k -> new long[2]);
                g[0]++;
                g[1] += t.bytes();
            }
            groups.forEach((labels, g) -> cb.call(g[which], labels.toArray(String[]::new)));
        }).register(r);
    }

    private static int compareLabels(List<String> a, List<String> b) {
        for (int i = 0; i < a.size(); i++) {
            int c = a.get(i).compareTo(b.get(i));
            if (c != 0) {
                return c;
            }
        }
        return 0;
    }

    /** A gauge of the catalog, left out of the page until there is one (the load is done). */
    private static void onCatalog(PrometheusRegistry r, Observed d, String name, String help,
            ToDoubleFunction<Catalog> value) {
        GaugeWithCallback.builder().name(name).help(help).callback(cb -> {
            Catalog c = d.catalog();
            if (c != null) {
                cb.call(value.applyAsDouble(c));
            }
        }).register(r);
    }

    private static void gauge(PrometheusRegistry r, String name, String help, DoubleSupplier value) {
        GaugeWithCallback.builder().name(name).help(help).callback(cb -> cb.call(value.getAsDouble())).register(r);
    }

    private static void counter(PrometheusRegistry r, String name, String help, DoubleSupplier value) {
        CounterWithCallback.builder().name(name).help(help).callback(cb -> cb.call(value.getAsDouble())).register(r);
    }
}
