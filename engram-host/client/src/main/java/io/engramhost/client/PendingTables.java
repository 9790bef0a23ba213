package io.engramhost.client;

import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;

/**
 * What {@link EngramClient#connectInBackground} returns at once: the import, running on a daemon thread of its own
 * ({@code engram-attach}). {@link #isReady()} says without waiting whether it has finished; {@link #await()} returns
 * its {@link ImportedTables} or throws what {@link EngramClient#connect} would have thrown; {@link #close()} stops it
 * and frees everything it attached, and closes its tables if it had finished.
 *
 * <p>At the JVM's exit (a shutdown hook, registered with the first background connect), imports still running are
 * stopped and their threads waited for up to {@link #EXIT_WAIT_MILLIS}, so that an exit neither waits for an attach
 * nobody will use nor cuts a driver call of one short. Like {@link ImportedTables}, a handle must be closed: one
 * dropped unclosed keeps what it attached until the process ends.
 */
public final class PendingTables implements AutoCloseable {
    /** How long the JVM's exit waits for background connects still running to stop. */
    public static final long EXIT_WAIT_MILLIS = 5000;

    /** Background connects whose thread runs, for the exit's wait. */
    private static final Set<PendingTables> RUNNING = ConcurrentHashMap.newKeySet();
    private static final AtomicBoolean EXIT_HOOKED = new AtomicBoolean();

    private final String socket;
    private final Cancel cancel = new Cancel();
    private final CountDownLatch done = new CountDownLatch(1);
    private final Object lock = new Object();
    private final Thread thread;
    private ImportedTables result; // guarded by lock
    private Throwable error; // guarded by lock
    private boolean closed; // guarded by lock

    private PendingTables(String socket, Function<Cancel, ImportedTables> run) {
        this.socket = socket;
        this.thread = new Thread(() -> run(run), "engram-attach");
        this.thread.setDaemon(true);
    }

    static PendingTables start(String socket, Function<Cancel, ImportedTables> run) {
        if (EXIT_HOOKED.compareAndSet(false, true)) {
            try {
                Runtime.getRuntime().addShutdownHook(new Thread(PendingTables::stopRunning, "engram-attach-exit"));
            } catch (IllegalStateException exiting) {
                // the JVM is exiting already: its daemon threads end with it
            }
        }
        PendingTables p = new PendingTables(socket, run);
        RUNNING.add(p);
        try {
            p.thread.start();
        } catch (RuntimeException | Error e) {
            RUNNING.remove(p);
            throw e;
        }
        return p;
    }

    private void run(Function<Cancel, ImportedTables> run) {
        try {
            ImportedTables imported;
            try {
                imported = run.apply(cancel);
            } catch (RuntimeException | Error e) {
                synchronized (lock) {
                    if (!cancel.isCancelled()) {
                        error = e;
                    }
                }
                return;
            }
            boolean keep;
            synchronized (lock) {
                keep = !cancel.isCancelled();
                if (keep) {
                    result = imported;
                }
            }
            if (!keep) {
                imported.close(); // closed meanwhile: nobody will take these
            }
        } finally {
            done.countDown();
            RUNNING.remove(this);
        }
    }

    /** The JVM is exiting: stops every background connect still running, and waits a while for their threads. */
    private static void stopRunning() {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(EXIT_WAIT_MILLIS);
        PendingTables[] running = RUNNING.toArray(PendingTables[]::new);
        for (PendingTables p : running) {
            p.cancel();
        }
        for (PendingTables p : running) {
            try {
                p.thread.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /** True once {@link #await()} would not wait: the import finished, with tables or an error, or was closed. */
    public boolean isReady() {
        synchronized (lock) {
            return closed || done.getCount() == 0;
        }
    }

    /** Whether {@link #cancel()} or {@link #close()} was called. */
    public boolean isClosed() {
        synchronized (lock) {
            return closed;
        }
    }

    /**
     * The imported tables once the attach has completed (the same object on every call), waiting as long as it
     * takes.
     *
     * @throws EngramClientException what {@link EngramClient#connect} would have thrown ({@link
     *     DaemonAbsentException}, {@link FingerprintMismatchException}, a refusal with its {@link
     *     EngramClientException#code()}, ...: the same exception object on every call, its stack trace the worker's);
     *     also once this handle is closed, or when the calling thread is interrupted (its interrupt status kept; the
     *     import goes on)
     */
    public ImportedTables await() {
        try {
            if (!isClosed()) {
                done.await();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new EngramClientException("interrupted while waiting for the background connect to " + socket
                    + "; it goes on", e);
        }
        return outcome();
    }

    /**
     * {@link #await()}, waiting at most {@code timeout}.
     *
     * @throws TimeoutException when {@code timeout} passes before the import finished; it goes on ({@link #await()}
     *     again, or {@link #close()} to stop it)
     */
    public ImportedTables await(Duration timeout) throws TimeoutException {
        try {
            if (!isClosed() && !done.await(timeout.toNanos(), TimeUnit.NANOSECONDS)) {
                throw new TimeoutException("the background connect to " + socket + " is still attaching after "
                        + timeout.toMillis() + " ms; it goes on: await again, or close to stop it");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new EngramClientException("interrupted while waiting for the background connect to " + socket
                    + "; it goes on", e);
        }
        return outcome();
    }

    private ImportedTables outcome() {
        synchronized (lock) {
            if (closed) {
                throw new EngramClientException("the background connect to " + socket + " was closed");
            }
            if (error instanceof RuntimeException e) {
                throw e;
            }
            if (error instanceof Error e) {
                throw e;
            }
            return result;
        }
    }

    /**
     * Stops the import without waiting: its thread stops at its next step (between the handshake, each retry while
     * the daemon loads, the manifest and each region's attach), or at once when it is waiting for the daemon's
     * answer (the connection is shut down), and frees everything it attached. Tables already finished are closed.
     * Idempotent.
     */
    public void cancel() {
        ImportedTables finished;
        synchronized (lock) {
            if (closed) {
                return;
            }
            closed = true;
            finished = result;
            result = null;
            cancel.cancel();
        }
        if (finished != null) {
            finished.close();
        }
    }

    /**
     * {@link #cancel()}, then waits until the import's thread has freed everything: the fds received, the mappings,
     * registrations and imports, and the connection, so that the daemon ends the lease (or the connection of an
     * import it had not served). A driver call under way finishes first. Tables {@link #await()} returned are closed
     * too. Idempotent.
     */
    @Override
    public void close() {
        cancel();
        if (Thread.currentThread() != thread) {
            boolean interrupted = false;
            while (true) {
                try {
                    thread.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public String toString() {
        synchronized (lock) {
            String state = closed ? "closed" : error != null ? "failed" : done.getCount() == 0 ? "ready" : "attaching";
            return "PendingTables[" + socket + ", " + state + "]";
        }
    }
}
