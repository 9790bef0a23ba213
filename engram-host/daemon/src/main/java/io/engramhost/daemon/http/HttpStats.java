package io.engramhost.daemon.http;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The HTTP server's own connections (the metrics port's, not the Unix socket's): what {@link MetricsServer} counts,
 * and the metrics read.
 */
public final class HttpStats {
    final AtomicInteger open = new AtomicInteger();
    final AtomicLong accepted = new AtomicLong();
    final AtomicLong evicted = new AtomicLong();
    final AtomicLong timedOut = new AtomicLong();

    /** Connections open on the metrics port now. */
    public int open() {
        return open.get();
    }

    public long accepted() {
        return accepted.get();
    }

    /** Closed at the connection cap, oldest first. */
    public long evicted() {
        return evicted.get();
    }

    /** Closed by a deadline (idle, request head or answer). */
    public long timedOut() {
        return timedOut.get();
    }
}
