package io.engramhost.client;

import io.engramhost.os.Posix;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

/**
 * Watches the daemon through the lease connection and calls back once when it ends (EOF or an error): the
 * daemon stopped, died, or ended the lease. Not the daemon's pid: a takeover moves the lease to a successor
 * process and the pid that answered the import exits, while the tables stay served (docs/protocol.md, "The
 * lease"). The client's mappings stay valid either way: the callback only tells the engine that its next
 * restart would pay a full load.
 */
final class DaemonWatch implements AutoCloseable {
    private final int leaseFd;
    private final List<Consumer<String>> callbacks = new CopyOnWriteArrayList<>();
    private final AtomicBoolean fired = new AtomicBoolean();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicBoolean joined = new AtomicBoolean();
    private final AtomicBoolean started = new AtomicBoolean();
    private final Thread thread;
    private volatile String goneReason;

    DaemonWatch(int leaseFd) {
        this.leaseFd = leaseFd;
        this.thread = new Thread(this::watch, "engram-daemon-watch");
        this.thread.setDaemon(true);
    }

    /**
     * Registers a callback; the watching thread starts with the first one (an engine that never asks
     * pays no thread). Called at once when the daemon is already gone.
     */
    synchronized void onGone(Consumer<String> callback) {
        callbacks.add(callback);
        String reason = goneReason;
        if (reason != null) {
            callback.accept(reason);
        } else if (!closed.get() && started.compareAndSet(false, true)) {
            thread.start();
        }
    }

    /** Why the daemon is gone, or null; looks without waiting when no thread watches. */
    String goneReason() {
        if (!started.get() && !closed.get() && goneReason == null) {
            check(0);
        }
        return goneReason;
    }

    private void watch() {
        while (!closed.get() && !check(200)) {
            // poll again
        }
    }

    /** One poll of the lease; true once the daemon is known to be gone. */
    private boolean check(int timeoutMillis) {
        short[] revents = Posix.pollAll(new int[] {leaseFd}, Posix.POLLIN, timeoutMillis);
        if (closed.get()) {
            return true;
        }
        if (revents[0] != 0) {
            fire("the daemon closed the lease connection");
            return true;
        }
        return false;
    }

    private synchronized void fire(String reason) {
        if (fired.compareAndSet(false, true)) {
            goneReason = reason;
            for (Consumer<String> c : callbacks) {
                try {
                    c.accept(reason);
                } catch (RuntimeException e) {
                    // a failing callback must not stop the others
                }
            }
        }
    }

    /** Tells the watcher to stop without firing; the caller then wakes its poll (shuts the lease down). */
    synchronized void stopWatching() {
        closed.set(true);
    }

    /** Stops watching; joins the thread before the lease fd is closed by the caller. */
    @Override
    public void close() {
        if (!joined.getAndSet(true)) {
            synchronized (this) {
                closed.set(true); // under the lock: onGone cannot start the thread after this
            }
            try {
                if (started.get()) {
                    thread.join(2000);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
