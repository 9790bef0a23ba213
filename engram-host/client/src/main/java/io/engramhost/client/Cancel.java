package io.engramhost.client;

import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.ProtocolChannel;

/**
 * How a background connect ({@link PendingTables}) is told to stop: a flag its worker looks at between the import's
 * steps ({@link #check()}), and the connection the worker may be waiting on, shut down so that its wait for the
 * daemon's answer ends at once. The shutdown happens under the lock that the worker's own close takes, so it never
 * touches a closed (and perhaps reused) fd. {@link #NONE} is the token of a connect on the caller's thread.
 */
class Cancel {
    /** A connect on the caller's own thread: never cancelled. */
    static final Cancel NONE = new Cancel() {
        @Override
        void watch(UnixConnection c) {
        }

        @Override
        void check() {
        }

        @Override
        void sleep(long millis) {
            try {
                Thread.sleep(millis);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new EngramClientException("interrupted while waiting for the daemon", e);
            }
        }
    };

    /** Raised in the worker once the import was cancelled; never reaches a caller. */
    static final class Cancelled extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Cancelled() {
            super("the background connect was closed", null, false, false);
        }
    }

    private final Object lock = new Object();
    private volatile boolean cancelled;
    private UnixConnection watched;

    boolean isCancelled() {
        return cancelled;
    }

    void cancel() {
        synchronized (lock) {
            cancelled = true;
            shutdownWatched();
            lock.notifyAll();
        }
    }

    private void shutdownWatched() {
        if (watched != null) {
            try {
                watched.shutdown();
            } catch (RuntimeException e) {
                // not connected any more: nothing to wake
            }
        }
    }

    /** The connection the worker is about to wait on. */
    void watch(UnixConnection c) {
        synchronized (lock) {
            watched = c;
            if (cancelled) {
                shutdownWatched();
            }
        }
    }

    /** The connection is the lease now: a cancel no longer touches it. */
    void release(UnixConnection c) {
        synchronized (lock) {
            if (watched == c) {
                watched = null;
            }
        }
    }

    /** Closes {@code channel}, never while a cancel shuts its connection down. */
    void close(ProtocolChannel channel) {
        synchronized (lock) {
            if (watched == channel.connection()) {
                watched = null;
            }
            channel.close();
        }
    }

    /** Throws {@link Cancelled} once cancelled. */
    void check() {
        if (cancelled) {
            throw new Cancelled();
        }
    }

    /** Sleeps {@code millis}, or less when cancelled meanwhile (then throws {@link Cancelled}). */
    void sleep(long millis) {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        synchronized (lock) {
            while (!cancelled) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return;
                }
                try {
                    lock.wait(Math.max(1, left / 1_000_000L));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new EngramClientException("interrupted while waiting for the daemon", e);
                }
            }
        }
        throw new Cancelled();
    }
}
