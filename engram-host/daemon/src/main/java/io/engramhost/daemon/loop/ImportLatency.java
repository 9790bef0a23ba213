package io.engramhost.daemon.loop;

import io.prometheus.metrics.core.metrics.Histogram;
import io.prometheus.metrics.model.registry.PrometheusRegistry;

/**
 * The import-latency histogram of {@code /metrics} ({@code engram_host_import_duration_seconds}): for each IMPORT
 * answered with a MANIFEST, the time from the daemon taking up the decoded request to the last byte of the answer
 * (its fds included) being written to the socket. The Prometheus client library's {@link Histogram}, classic
 * buckets only (fixed, {@link #BOUNDS}), no exemplars; a worker and the poll loop may record while a scrape reads.
 * It counts from the daemon's start whether or not {@code --metrics-port} is given; {@link DaemonMetrics} registers
 * it in the metrics server's registry.
 */
public final class ImportLatency {
    static final String NAME = "engram_host_import_duration_seconds";
    /** Upper bounds of the buckets, in seconds (then +Inf). */
    static final double[] BOUNDS = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

    private final Histogram histogram = Histogram.builder()
            .name(NAME)
            .help("Imports served: from the request taken up to the manifest and its fds written.")
            .classicOnly()
            .classicUpperBounds(BOUNDS)
            .withoutExemplars()
            .build();

    void record(long nanos) {
        histogram.observe(nanos / 1e9);
    }

    /** Registers the histogram in {@code r} (the metrics server's registry). */
    public void registerIn(PrometheusRegistry r) {
        r.register(histogram);
    }
}
