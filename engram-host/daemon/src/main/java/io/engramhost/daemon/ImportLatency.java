package io.engramhost.daemon;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The import-latency histogram of {@code /metrics} ({@code engram_host_import_duration_seconds}): for each IMPORT
 * answered with a MANIFEST, the time from the daemon taking up the decoded request to the last byte of the answer
 * (its fds included) being written to the socket. Fixed buckets, lock-free: a worker and the poll loop may record
 * while a scrape reads.
 */
final class ImportLatency {
    /** Upper bounds of the buckets, in seconds (then +Inf). */
    static final double[] BOUNDS = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

    private final AtomicLongArray counts = new AtomicLongArray(BOUNDS.length + 1);
    private final AtomicLong sumNanos = new AtomicLong();

    void record(long nanos) {
        double seconds = nanos / 1e9;
        int i = 0;
        while (i < BOUNDS.length && seconds > BOUNDS[i]) {
            i++;
        }
        counts.incrementAndGet(i);
        sumNanos.addAndGet(nanos);
    }

    /** Cumulative counts per bucket, {@link #BOUNDS} then +Inf (the total). */
    long[] cumulative() {
        long[] out = new long[BOUNDS.length + 1];
        long running = 0;
        for (int i = 0; i < out.length; i++) {
            running += counts.get(i);
            out[i] = running;
        }
        return out;
    }

    double sumSeconds() {
        return sumNanos.get() / 1e9;
    }
}
