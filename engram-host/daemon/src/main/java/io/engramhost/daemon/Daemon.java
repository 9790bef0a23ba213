package io.engramhost.daemon;

import static java.lang.System.Logger.Level.ERROR;
import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.os.Posix;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadProgress;
import io.engramhost.util.Bytes;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The daemon's conductor: owns the lock, the listening socket, the session loop (which owns every
 * connection and lease) and the catalog, and tears them down in reverse order. The socket answers
 * (status, "not ready") from the moment it exists; the ready file appears only once every table is
 * loaded. A thread that dies of an error takes the daemon down ({@link #fatal}): it never stays
 * alive but deaf.
 */
public final class Daemon implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(Daemon.class.getName());
    public static final String VERSION = "0.1.0";
    /** How often a running load logs its progress. */
    static final long PROGRESS_LOG_MILLIS = 5000;
    /** The exit status of a daemon that a fatal error took down. */
    public static final int FATAL_EXIT = 70;

    private final DaemonContext context;
    private final Path socket;
    private final DaemonLock lock;
    private final UnixListener listener;
    private final Leases leases = new Leases();
    private final StatusDocument.Tables statusTables = new StatusDocument.Tables();
    private final ConnectionStats stats = new ConnectionStats();
    private final SessionLoop loop;
    private final LoadProgress progress = new LoadProgress(line -> {
        LOG.log(INFO, line);
        SystemdNotify n = this.systemd;
        if (n != null) {
            n.status("loading: " + line);
        }
    });
    /** systemd's notify socket (NOTIFY_SOCKET), or null when not under Type=notify. */
    private volatile SystemdNotify systemd;
    /** The catalog memfd adopted from the fd store, stored again (a no-op for systemd) once ready; then closed. */
    private volatile io.engramhost.os.Fd keptCatalog;
    private final CountDownLatch stopRequested = new CountDownLatch(1);
    private final CountDownLatch closeDone = new CountDownLatch(1);
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicBoolean dying = new AtomicBoolean();
    private final long startNanos = System.nanoTime();
    private final int pid = Posix.getpid();
    private volatile DaemonState state = DaemonState.LOADING;
    private volatile Catalog catalog;
    private volatile String stopReason;
    private volatile String failure;
    private volatile MetricsServer metrics;
    private final HandoverSender handover = new HandoverSender(this);
    /** The successor's pid once a handover committed: close then gives nothing up that the successor holds. */
    private volatile int handedOverTo;

    private Daemon(DaemonContext context, Path socket, DaemonLock lock, UnixListener listener) {
        this.context = context;
        this.socket = socket;
        this.lock = lock;
        this.listener = listener;
        this.loop = new SessionLoop(this, context.limits(), listener.fd().get(), socket.toString());
    }

    /** A daemon thread whose death by an error takes the daemon down. */
    Thread thread(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.setUncaughtExceptionHandler(this::fatal);
        return t;
    }

    /**
     * Takes the socket path (refusing when a live daemon owns it, cleaning files a dead one left),
     * listens, and starts answering in state {@code loading}.
     */
    public static Daemon start(DaemonContext context, Path socket) {
        return start(context, socket, null);
    }

    /**
     * As {@link #start(DaemonContext, Path)}; {@code handed} (null: none) is a listening socket systemd passed
     * (LISTEN_FDS): served on when it is bound to {@code socket} and that file is still there, so that the
     * clients waiting in its backlog are served; otherwise closed, and a new socket is bound.
     */
    public static Daemon start(DaemonContext context, Path socket, io.engramhost.os.Fd handed) {
        // The directory is checked once and then reached only through its fd (RuntimeDir, docs/security.md).
        boolean othersAdmitted = !context.allowUids().isEmpty();
        DaemonLock lock;
        try {
            lock = DaemonLock.acquire(RuntimeDir.prepare(socket.getParent(), othersAdmitted), socket);
        } catch (RuntimeException e) {
            if (handed != null) {
                handed.close();
            }
            throw e;
        }
        UnixListener listener = null;
        try {
            listener = listen(lock, socket, handed, othersAdmitted);
            Posix.raiseNoFileLimit();
            Daemon d = new Daemon(context, socket, lock, listener);
            d.loop.start();
            LOG.log(INFO, "listening on " + socket + " (pid " + d.pid + ", backend " + context.backend() + ")");
            return d;
        } catch (RuntimeException e) {
            if (listener != null) {
                listener.close();
                lock.dir().removeQuietly(socket.getFileName().toString());
            }
            lock.close();
            throw e;
        }
    }

    /**
     * The listening socket, once {@code lock} is held: {@code handed} (from systemd's fd store or a socket unit)
     * when it listens on {@code socket} and the file there is a socket (the previous daemon left it for the
     * clients queued in the backlog); otherwise anything stale is removed and a new socket bound. The ready file
     * is always removed.
     */
    static UnixListener listen(DaemonLock lock, Path socket, io.engramhost.os.Fd handed, boolean othersAdmitted) {
        String name = socket.getFileName().toString();
        lock.dir().removeStale(SocketPaths.readyFile(socket).getFileName().toString());
        if (handed != null) {
            io.engramhost.os.FileStat st = lock.dir().fd().statAt(name);
            if (st != null && st.isSocket() && st.uid() == Posix.geteuid()) {
                try {
                    UnixListener l = UnixListener.adopt(handed, socket);
                    LOG.log(INFO, "serving on the listening socket systemd passed (" + socket + "): clients queued"
                            + " in its backlog are served");
                    return l;
                } catch (RuntimeException e) {
                    LOG.log(WARNING, e.getMessage() + "; binding a new one");
                }
            } else {
                handed.close();
                LOG.log(WARNING, "the listening socket systemd passed is bound to " + socket + ", which is "
                        + (st == null ? "gone" : "not this daemon's socket") + ": binding a new one");
            }
        }
        lock.dir().removeStale(name);
        UnixListener l = UnixListener.bind(socket, 4096); // fails (EADDRINUSE) on anything planted since: never follows it
        try {
            lock.dir().protectSocket(name, othersAdmitted);
        } catch (RuntimeException e) {
            l.close();
            lock.dir().removeQuietly(name);
            throw e;
        }
        return l;
    }

    /**
     * The successor's side of a takeover, past its commit point: a daemon made of what the predecessor handed
     * over, ready at once. Its loop owns {@code connections} (leases among them, listed under their old ids);
     * the ready file is rewritten with this pid. Owns everything it is given, also when this fails.
     */
    static Daemon adopted(DaemonContext context, Path socket, DaemonLock lock, UnixListener listener, Catalog catalog,
            List<SessionLoop.Quiet> connections, java.util.Map<Long, java.time.Instant> leaseSince, long nextLeaseId,
            java.util.Map<String, Object> report, java.util.Map<String, Object> origin) {
        Daemon d;
        try {
            Posix.raiseNoFileLimit();
            d = new Daemon(context, socket, lock, listener);
        } catch (RuntimeException e) {
            connections.forEach(q -> q.fd().close());
            closeQuietly(catalog);
            listener.close();
            lock.close();
            throw e;
        }
        d.catalog = catalog;
        d.loop.install(connections, id -> leaseSince.getOrDefault(id, java.time.Instant.now()));
        d.leases.continueFrom(nextLeaseId);
        report.forEach(d.progress::put);
        d.progress.put("origin", origin);
        d.progress.finish(catalog.totalBytes());
        d.state = DaemonState.READY;
        ReadyFile.write(lock.dir().fd(), SocketPaths.readyFile(socket).getFileName().toString(), d.pid,
                catalog.fingerprintSha256(), catalog.backend(), socket);
        d.loop.start();
        return d;
    }

    static void closeQuietly(Catalog c) {
        try {
            c.close();
        } catch (Exception e) {
            LOG.log(WARNING, "freeing the tables failed: " + e.getMessage());
        }
    }

    /**
     * Starts the metrics and health HTTP server ({@code serve --metrics-port}) on {@code address:port}, before
     * the load so that /live and /ready answer during it. A port in use throws with one line; the caller
     * closes the daemon. Returns the address it listens on.
     */
    public java.net.InetSocketAddress startMetrics(java.net.InetAddress address, int port, String version,
            String commit, String protocol) {
        MetricsServer m = MetricsServer.start(this, address, port, version, commit, protocol);
        metrics = m;
        if (closed.get()) {
            m.close();
        }
        return m.address();
    }

    /** Loads the catalog; on success the daemon is ready and the ready file is written. */
    public void load(CatalogBuilder builder) throws Exception {
        load(builder, true);
    }

    /**
     * As {@link #load(CatalogBuilder)}; {@code logProgress} false leaves out the progress line logged every
     * {@link #PROGRESS_LOG_MILLIS}, for a caller that shows {@link #progress()} itself (serve on a terminal).
     */
    public void load(CatalogBuilder builder, boolean logProgress) throws Exception {
        long t0 = System.nanoTime();
        Thread ticker = thread(() -> {
            if (!logProgress && systemd == null) {
                return;
            }
            try {
                while (true) {
                    Thread.sleep(PROGRESS_LOG_MILLIS);
                    if (logProgress) {
                        LOG.log(INFO, progress.text());
                    }
                    SystemdNotify n = systemd;
                    if (n != null) {
                        n.status("loading: " + progress.text());
                    }
                }
            } catch (InterruptedException done) {
                // the load is over
            }
        }, "engram-progress");
        ticker.start();
        try {
            Catalog c = builder.build(progress);
            if (closed.get()) {
                c.close();
                return;
            }
            catalog = c;
        } catch (Exception e) {
            failure = String.valueOf(e.getMessage());
            state = DaemonState.FAILED;
            SystemdNotify n = systemd;
            if (n != null) {
                n.status("load failed: " + failure);
            }
            throw e;
        } finally {
            ticker.interrupt();
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        double sinceStart = secondsSinceProcessStart();
        progress.finish(catalog.totalBytes());
        progress.put("ready_s", seconds);
        progress.put("process_ready_s", sinceStart);
        progress.put("ready_gib_s", sinceStart > 0 ? catalog.totalBytes() / (double) (1L << 30) / sinceStart : 0.0);
        progress.put("origin", java.util.Map.of("how", "load", "checkpoint_bytes_read", catalog.totalBytes()));
        state = DaemonState.READY;
        ReadyFile.write(lock.dir().fd(), SocketPaths.readyFile(socket).getFileName().toString(), pid,
                catalog.fingerprintSha256(), catalog.backend(), socket);
        LOG.log(INFO, "ready: " + catalog.allTables().size() + " tables, " + Bytes.format(catalog.totalBytes())
                + " in " + catalog.regionCount() + (catalog.regionCount() == 1 ? " region" : " regions") + ", after "
                + String.format("%.2f s (%.2f s from the process's start, %.2f GiB/s)", seconds, sinceStart,
                        sinceStart > 0 ? catalog.totalBytes() / (double) (1L << 30) / sinceStart : 0.0)
                + "; fingerprint " + catalog.fingerprintSha256());
        announceReady();
    }

    /** Seconds since this process started (the JVM's start, which the kernel's start time bounds to a few ms). */
    private static double secondsSinceProcessStart() {
        return java.lang.management.ManagementFactory.getRuntimeMXBean().getUptime() / 1e3;
    }

    /**
     * Under systemd ({@code NOTIFY_SOCKET}): removes the fd store's {@code stale} entries (names a previous run
     * stored that this daemon does not serve), stores the listening socket, starts the watchdog, and once the
     * tables are ready stores them and sends READY=1. {@code keptCatalog} (null: none) is the catalog memfd
     * adopted from the fd store, stored again as it is.
     */
    public void attachSystemd(SystemdNotify n, java.util.Collection<String> stale, io.engramhost.os.Fd kept) {
        keptCatalog = kept;
        stale.forEach(n::remove);
        n.storeListener(listener.fd());
        systemd = n;
        n.startWatchdog(this);
        if (state == DaemonState.READY) {
            announceReady();
        } else {
            n.status("loading");
        }
    }

    /** The tables into systemd's fd store, then READY=1 (under systemd; nothing otherwise). */
    private void announceReady() {
        SystemdNotify n = systemd;
        Catalog c = catalog;
        if (n == null || c == null) {
            return;
        }
        io.engramhost.os.Fd kept = keptCatalog;
        keptCatalog = null;
        try {
            n.storeCatalog(HandoverSender.encode(c, io.engramhost.json.JsonWriter.write(progress.facts())), kept);
        } finally {
            if (kept != null) {
                kept.close();
            }
        }
        Object origin = progress.facts().get("origin");
        String how = origin instanceof java.util.Map<?, ?> m ? String.valueOf(m.get("how")) : "load";
        n.ready("ready (" + how + "): " + c.allTables().size() + " tables, " + Bytes.format(c.totalBytes()) + " in "
                + c.regionCount() + " regions; fingerprint " + c.fingerprintSha256());
    }

    /** Blocks until a STOP request, a signal (via {@link #requestStop}) or {@code close}. */
    public void awaitStop() throws InterruptedException {
        stopRequested.await();
    }

    public void requestStop(String reason) {
        if (stopReason == null) {
            stopReason = reason;
        }
        state = DaemonState.STOPPING;
        stopRequested.countDown();
    }

    public String stopReason() {
        return stopReason;
    }

    /**
     * A thread died of {@code error}: one log line, the ready file and socket removed, exit
     * {@link #FATAL_EXIT}. The kernel frees the lock and the memory; clients keep their mappings and
     * see their leases end.
     */
    public void fatal(Thread thread, Throwable error) {
        if (!dying.compareAndSet(false, true)) {
            return;
        }
        try {
            LOG.log(ERROR, "fatal: thread " + thread.getName() + " died of " + error + "; the daemon exits with status "
                    + FATAL_EXIT);
            deleteQuietly(SocketPaths.readyFile(socket));
            SystemdNotify n = systemd;
            if (n == null || !n.listenerStored()) {
                deleteQuietly(socket);
            }
        } finally {
            Runtime.getRuntime().halt(FATAL_EXIT);
        }
    }

    /**
     * Removes the ready file and the socket, ends every lease and frees every table. Idempotent; a
     * second caller (a signal's shutdown hook racing the main thread) waits until the first is done,
     * so the JVM never halts half-way through.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            try {
                closeDone.await(30, java.util.concurrent.TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return;
        }
        try {
            closeOnce();
        } finally {
            closeDone.countDown();
        }
    }

    private void closeOnce() {
        if (handedOverTo > 0) {
            closeHandedOver();
            return;
        }
        state = DaemonState.STOPPING;
        stopRequested.countDown();
        SystemdNotify n = systemd;
        if (n != null) {
            n.stopping("stopping" + (stopReason == null ? "" : " (" + stopReason + ")"));
        }
        deleteQuietly(SocketPaths.readyFile(socket));
        if (n == null || !n.listenerStored()) {
            deleteQuietly(socket);
        } // else systemd's fd store keeps the listening socket: clients queue in its backlog for the next daemon
        MetricsServer m = metrics;
        if (m != null) {
            m.close();
        }
        loop.close();
        listener.close();
        Catalog c = catalog;
        catalog = null;
        if (c != null) {
            try {
                c.close();
            } catch (Exception e) {
                LOG.log(WARNING, "freeing the tables failed: " + e.getMessage());
            }
        }
        lock.close();
        if (n != null) {
            n.close();
        }
        LOG.log(INFO, "stopped" + (stopReason == null ? "" : " (" + stopReason + ")"));
    }

    /**
     * After a committed handover: the successor holds every fd this daemon had (a copy of each), so closing
     * ours frees nothing a client sees, and the socket and ready file are the successor's now: both stay.
     */
    private void closeHandedOver() {
        state = DaemonState.STOPPING;
        stopRequested.countDown();
        MetricsServer m = metrics;
        if (m != null) {
            m.close();
        }
        loop.closeHandedOver(handedOverTo);
        listener.close();
        Catalog c = catalog;
        catalog = null;
        if (c != null) {
            closeQuietly(c);
        }
        lock.close();
        LOG.log(INFO, "stopped (" + stopReason + ")");
    }

    // ------------------------------------------------------------------------------------ handover, predecessor

    HandoverSender handoverSender() {
        return handover;
    }

    /** The listening socket, to hand over; this daemon keeps owning it. */
    io.engramhost.os.BorrowedFd listenerFd() {
        return listener.fd();
    }

    io.engramhost.os.Fd lockFd() {
        return lock.fd();
    }

    java.util.concurrent.CompletableFuture<List<SessionLoop.Quiet>> freezeForHandover(long drainMillis) {
        return loop.freeze(drainMillis);
    }

    void resumeAfterHandover() {
        loop.resume();
    }

    /** The commit point passed: the daemon stops without touching what the successor now owns. */
    void handedOver(int successor) {
        handedOverTo = successor;
        requestStop("handed over to pid " + successor);
    }

    /** Removes a file next to the socket through the checked directory's fd, never following a symlink. */
    private void deleteQuietly(Path p) {
        lock.dir().removeQuietly(p.getFileName().toString());
    }

    public DaemonContext context() {
        return context;
    }

    public Path socket() {
        return socket;
    }

    public int pid() {
        return pid;
    }

    public int uid() {
        return Posix.geteuid();
    }

    public DaemonState state() {
        return state;
    }

    Catalog catalog() {
        return catalog;
    }

    Leases leases() {
        return leases;
    }

    ConnectionStats stats() {
        return stats;
    }

    String failure() {
        return failure;
    }

    double uptimeSeconds() {
        return (System.nanoTime() - startNanos) / 1e9;
    }

    long heartbeatNanos() {
        return loop.heartbeatNanos();
    }

    long requestMemoryUsed() {
        return loop.requestMemoryUsed();
    }

    /** How far the load has got (STATUS's {@code progress}). */
    public LoadProgress progress() {
        return progress;
    }

    public String progressText() {
        return progress.text();
    }

    /** The STATUS document (docs/protocol.md lists its fields). */
    public String statusJson() {
        return StatusDocument.of(this, loop.requestMemoryUsed());
    }

    StatusDocument.Tables statusTables() {
        return statusTables;
    }

    /** STATUS_REPLY in {@code version}, its tables shared with every other answer (StatusDocument). */
    List<io.engramhost.protocol.Parts.Slice> statusReply(int version) {
        return StatusDocument.reply(this, loop.requestMemoryUsed(), version);
    }
}
