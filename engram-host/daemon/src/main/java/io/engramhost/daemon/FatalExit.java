package io.engramhost.daemon;

import static java.lang.System.Logger.Level.ERROR;

import io.engramhost.daemon.launch.RuntimeDir;
import io.engramhost.util.Threads;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;

/**
 * What a thread that dies of an error does to its daemon: one log line, the ready file and the socket removed (the
 * socket stays when systemd's fd store keeps its listener for the next daemon), exit {@value #STATUS}. The kernel
 * frees the lock and the memory; clients keep their mappings and see their leases end. A daemon never stays alive
 * but deaf.
 */
final class FatalExit implements Thread.UncaughtExceptionHandler {
    private static final System.Logger LOG = System.getLogger(FatalExit.class.getName());
    /** The exit status of a daemon that a fatal error took down. */
    static final int STATUS = 70;

    private final RuntimeDir dir;
    private final String socketName;
    private final String readyName;
    private final BooleanSupplier listenerStored;
    private final AtomicBoolean dying = new AtomicBoolean();

    FatalExit(RuntimeDir dir, String socketName, String readyName, BooleanSupplier listenerStored) {
        this.dir = dir;
        this.socketName = socketName;
        this.readyName = readyName;
        this.listenerStored = listenerStored;
    }

    @Override
    public void uncaughtException(Thread thread, Throwable error) {
        if (!dying.compareAndSet(false, true)) {
            return;
        }
        try {
            LOG.log(ERROR, "fatal: thread " + thread.getName() + " died of " + error + "; the daemon exits with status "
                    + STATUS);
            dir.removeOwn(readyName, false);
            if (!listenerStored.getAsBoolean()) {
                dir.removeOwn(socketName, true);
            }
        } finally {
            Runtime.getRuntime().halt(STATUS);
        }
    }

    /** The daemon's threads: daemon threads, named, whose death by an error is fatal. */
    Threads threads() {
        return (task, name) -> {
            Thread t = new Thread(task, name);
            t.setDaemon(true);
            t.setUncaughtExceptionHandler(this);
            return t;
        };
    }
}
