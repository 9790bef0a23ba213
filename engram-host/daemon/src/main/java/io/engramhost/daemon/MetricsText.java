package io.engramhost.daemon;

import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Manifest;
import io.engramhost.store.Catalog;
import io.engramhost.store.LoadTimings;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The {@code /metrics} page: Prometheus text exposition format 0.0.4, built from the same objects as
 * the STATUS document ({@link StatusDocument}), never from its JSON. docs/operating.md ("Metrics and
 * health") lists every metric.
 */
final class MetricsText {
    /** Per-table series stop here; past it only the aggregates by backend, NUMA node and device are written. */
    static final int MAX_TABLE_SERIES = 4096;

    /** What {@code engram_host_build_info} says. */
    record BuildInfo(String version, String commit, String protocol) {
    }

    private final StringBuilder out = new StringBuilder(4096);

    private MetricsText() {
    }

    static String of(Daemon d, BuildInfo build, long requestMemoryUsed, double heartbeatAgeSeconds) {
        MetricsText m = new MetricsText();
        m.write(d, build, requestMemoryUsed, heartbeatAgeSeconds);
        return m.out.toString();
    }

    private void write(Daemon d, BuildInfo build, long requestMemoryUsed, double heartbeatAgeSeconds) {
        head("engram_host_build_info", "gauge", "The build: version, git commit and protocol versions; always 1.");
        sample("engram_host_build_info", labels("version", build.version(), "commit", build.commit(), "protocol",
                build.protocol()), 1);

        DaemonState state = d.state();
        head("engram_host_state", "gauge", "1 for the daemon's state (loading, ready, stopping, failed), 0 for the others.");
        for (DaemonState s : DaemonState.values()) {
            sample("engram_host_state", labels("state", s.wireName()), s == state ? 1 : 0);
        }
        head("engram_host_ready", "gauge", "1 when every table is loaded and served, else 0.");
        sample("engram_host_ready", "", state == DaemonState.READY ? 1 : 0);
        head("engram_host_uptime_seconds", "gauge", "Seconds since the daemon started.");
        sample("engram_host_uptime_seconds", "", d.uptimeSeconds());
        head("engram_host_poll_loop_heartbeat_age_seconds", "gauge",
                "Seconds since the connection poll loop last went round (it does at least every second).");
        sample("engram_host_poll_loop_heartbeat_age_seconds", "", heartbeatAgeSeconds);

        head("engram_host_load_phase", "gauge", "1 for the load's current phase (starting, ..., loaded).");
        sample("engram_host_load_phase", labels("phase", d.progress().phase()), 1);
        head("engram_host_load_bytes_done", "gauge", "Bytes done in the load's current phase.");
        sample("engram_host_load_bytes_done", "", d.progress().bytesDone());
        head("engram_host_load_bytes_total", "gauge", "Bytes the load's current phase has to do.");
        sample("engram_host_load_bytes_total", "", d.progress().bytesTotal());
        LoadTimings t = d.progress().loadTimings();
        if (t != null) {
            head("engram_host_load_phase_seconds", "gauge", "Seconds the host tables' load spent per phase.");
            sample("engram_host_load_phase_seconds", labels("phase", "create"), t.createNanos() / 1e9);
            sample("engram_host_load_phase_seconds", labels("phase", "read"), t.readNanos() / 1e9);
            sample("engram_host_load_phase_seconds", labels("phase", "digest"), t.digestNanos() / 1e9);
            sample("engram_host_load_phase_seconds", labels("phase", "verify_seal"), t.verifySealNanos() / 1e9);
            head("engram_host_load_read_bytes", "gauge", "Bytes the load read from the checkpoint.");
            sample("engram_host_load_read_bytes", "", t.readBytes());
        }
        Map<String, Object> facts = d.progress().facts();
        if (facts.get("ready_s") instanceof Number n) {
            head("engram_host_ready_seconds", "gauge", "Seconds from the load's start to ready.");
            sample("engram_host_ready_seconds", "", n.doubleValue());
        }
        if (facts.get("placement") instanceof Map<?, ?> placement) {
            head("engram_host_placement_pages", "gauge", "Pages of the host tables verified on each NUMA node after load.");
            for (Map.Entry<?, ?> e : placement.entrySet()) {
                String k = String.valueOf(e.getKey());
                if (k.matches("node\\d+_pages") && e.getValue() instanceof Number n) {
                    sample("engram_host_placement_pages", labels("numa_node", k.substring(4, k.length() - 6)),
                            n.doubleValue());
                }
            }
        }

        Catalog c = d.catalog();
        if (c != null) {
            tables(c);
        }

        head("engram_host_leases", "gauge", "Clients holding a lease (an import whose connection is still open).");
        sample("engram_host_leases", "", d.leases().size());
        ConnectionStats s = d.stats();
        head("engram_host_connections_open", "gauge", "Connections open on the Unix socket, leases included.");
        sample("engram_host_connections_open", "", s.open.get());
        head("engram_host_request_memory_used_bytes", "gauge", "Bytes of unfinished requests held, all connections.");
        sample("engram_host_request_memory_used_bytes", "", requestMemoryUsed);
        counter("engram_host_connections_accepted_total", "Connections accepted on the Unix socket.", s.accepted.get());
        counter("engram_host_connections_refused_busy_total", "Connections refused at a connection cap (BUSY).",
                s.refusedBusy.get());
        counter("engram_host_connections_refused_not_allowed_total", "Connections refused: uid not admitted.",
                s.refusedNotAllowed.get());
        counter("engram_host_connections_evicted_total", "Connections evicted at a cap.", s.evicted.get());
        counter("engram_host_connections_timed_out_total", "Connections ended by a deadline.", s.timedOut.get());
        counter("engram_host_bad_requests_total", "Malformed requests (BAD_REQUEST).", s.badRequests.get());
        counter("engram_host_imports_total", "Imports served: manifests sent with their fds.", s.importsServed.get());
        head("engram_host_import_errors_total", "counter", "Imports refused, by error code.");
        for (ErrorCode code : ConnectionStats.IMPORT_ERRORS) {
            sample("engram_host_import_errors_total", labels("code", code.name()), s.importErrors(code));
        }
        String latency = "engram_host_import_duration_seconds";
        head(latency, "histogram", "Imports served: from the request taken up to the manifest and its fds written.");
        long[] cumulative = s.importLatency.cumulative();
        for (int i = 0; i < ImportLatency.BOUNDS.length; i++) {
            String le = java.math.BigDecimal.valueOf(ImportLatency.BOUNDS[i]).stripTrailingZeros().toPlainString();
            sample(latency + "_bucket", labels("le", le), cumulative[i]); // 0.0005, not 5.0E-4
        }
        sample(latency + "_bucket", labels("le", "+Inf"), cumulative[ImportLatency.BOUNDS.length]);
        sample(latency + "_sum", "", s.importLatency.sumSeconds());
        sample(latency + "_count", "", cumulative[ImportLatency.BOUNDS.length]);
    }

    private void tables(Catalog c) {
        List<Manifest.Table> all = c.allTables();
        head("engram_host_regions", "gauge", "Regions (fds) the daemon holds.");
        sample("engram_host_regions", "", c.regionCount());
        head("engram_host_served_bytes", "gauge", "Bytes of every table served, together (STATUS bytes).");
        sample("engram_host_served_bytes", "", c.totalBytes());
        Map<String, long[]> groups = new TreeMap<>();
        for (Manifest.Table t : all) {
            long[] g = groups.computeIfAbsent(labels("backend", t.kind().backend(), "numa_node",
                    Integer.toString(t.numaNode()), "device", Integer.toString(t.device())), k -> new long[2]);
            g[0]++;
            g[1] += t.bytes();
        }
        head("engram_host_tables", "gauge", "Tables served, by backend, NUMA node and device (-1: none).");
        groups.forEach((labels, g) -> sample("engram_host_tables", labels, g[0]));
        head("engram_host_resident_bytes", "gauge", "Bytes of the tables served, by backend, NUMA node and device.");
        groups.forEach((labels, g) -> sample("engram_host_resident_bytes", labels, g[1]));
        long host = 0;
        long huge = 0;
        for (Manifest.Table t : all) {
            if (t.device() < 0) {
                host += t.bytes();
                huge += t.kind() == io.engramhost.protocol.RegionKind.MEMFD_HUGETLB ? t.bytes() : 0;
            }
        }
        head("engram_host_hugepage_coverage_ratio", "gauge",
                "Share of the host tables' bytes in huge pages (memfd-hugetlb regions); 0 with no host table.");
        sample("engram_host_hugepage_coverage_ratio", "", host == 0 ? 0 : (double) huge / host);
        head("engram_host_table_series_omitted", "gauge",
                "Tables left out of engram_host_table_bytes (past " + MAX_TABLE_SERIES + " tables).");
        sample("engram_host_table_series_omitted", "", Math.max(0, all.size() - MAX_TABLE_SERIES));
        head("engram_host_table_bytes", "gauge", "Bytes of one table (the first " + MAX_TABLE_SERIES + " tables only).");
        for (int i = 0; i < Math.min(all.size(), MAX_TABLE_SERIES); i++) {
            Manifest.Table t = all.get(i);
            sample("engram_host_table_bytes", labels("table", t.name(), "backend", t.kind().backend(), "numa_node",
                    Integer.toString(t.numaNode()), "device", Integer.toString(t.device())), t.bytes());
        }
    }

    private void head(String name, String type, String help) {
        out.append("# HELP ").append(name).append(' ').append(help.replace("\\", "\\\\").replace("\n", "\\n"))
                .append('\n');
        out.append("# TYPE ").append(name).append(' ').append(type).append('\n');
    }

    private void counter(String name, String help, long value) {
        head(name, "counter", help);
        sample(name, "", value);
    }

    private void sample(String name, String labels, double value) {
        out.append(name).append(labels).append(' ').append(number(value)).append('\n');
    }

    private static String number(double v) {
        if (Double.isNaN(v)) {
            return "NaN";
        }
        if (Double.isInfinite(v)) {
            return v > 0 ? "+Inf" : "-Inf";
        }
        if (v == Math.rint(v) && Math.abs(v) < 1e15) {
            return Long.toString((long) v);
        }
        return Double.toString(v);
    }

    /** {@code {k1="v1",k2="v2"}} with the values escaped as the format asks (backslash, quote, newline). */
    static String labels(String... kv) {
        List<String> parts = new ArrayList<>(kv.length / 2);
        for (int i = 0; i < kv.length; i += 2) {
            String v = kv[i + 1] == null ? "" : kv[i + 1];
            parts.add(kv[i] + "=\"" + v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"");
        }
        return "{" + String.join(",", parts) + "}";
    }
}
