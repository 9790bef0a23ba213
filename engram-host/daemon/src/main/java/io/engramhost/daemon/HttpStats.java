package io.engramhost.daemon;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The HTTP server's own connections (the metrics port's, not the Unix socket's): what {@link MetricsServer} counts,
 * and the metrics read.
 */
final class HttpStats {
    final AtomicInteger open = new AtomicInteger();
    final AtomicLong accepted = new AtomicLong();
    final AtomicLong evicted = new AtomicLong();
    final AtomicLong timedOut = new AtomicLong();

    /** Connections open on the metrics port now. */
    int open() {
        return open.get();
    }

    long accepted() {
        return accepted.get();
    }

    /** Closed at the connection cap, oldest first. */
    long evicted() {
        return evicted.get();
    }

    /** Closed by a deadline (idle, request head or answer). */
    long timedOut() {
        return timedOut.get();
    }
}
