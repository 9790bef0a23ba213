package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.daemon.handover.HandoverSender;
import io.engramhost.daemon.http.MetricsServer;
import io.engramhost.daemon.launch.Adoption;
import io.engramhost.daemon.launch.DaemonLock;
import io.engramhost.daemon.loop.Answers;
import io.engramhost.daemon.loop.ConnectionStats;
import io.engramhost.daemon.loop.HandedConnection;
import io.engramhost.daemon.loop.Leases;
import io.engramhost.daemon.loop.Requests;
import io.engramhost.daemon.loop.Services;
import io.engramhost.daemon.loop.SessionLoop;
import io.engramhost.daemon.systemd.Supervisor;
import io.engramhost.daemon.systemd.SystemdNotify;
import io.engramhost.os.BorrowedFd;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.Parts;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.protocol.Welcome;
import io.engramhost.seed.SeedExporter;
import io.engramhost.seed.SeedStats;
import io.engramhost.store.Catalog;
import io.engramhost.store.LoadProgress;
import io.engramhost.store.LoadReport;
import io.engramhost.util.BuildInfo;
import io.engramhost.util.Closer;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A running daemon: it owns what its {@link Adoption} brought (the lock, the listening socket, the catalog or the
 * load that makes it), the session loop (which owns every connection and lease), and tears them down in reverse
 * order. The socket answers (status, "not ready") from the moment it serves; the ready file appears only once every
 * table is loaded. {@link DaemonLauncher#start} makes one; {@link #run} is the only way in.
 */
public final class Daemon implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(Daemon.class.getName());

    private final DaemonContext context;
    private final Path socket;
    private final DaemonLock lock;
    private final UnixListener listener;
    private final SystemdNotify systemd;
    private final Leases leases = new Leases();
    private final ConnectionStats stats = new ConnectionStats();
    private final FatalExit fatal;
    private final Services services;
    private final LoadProgress progress;
    private final HandoverSender handover;
    private final SessionLoop loop;
    private final View view = new View();
    private final int pid = Posix.getpid();
    private final long startNanos = System.nanoTime();
    private final CountDownLatch stopRequested = new CountDownLatch(1);
    private final CountDownLatch settled = new CountDownLatch(1);
    private final CountDownLatch closeDone = new CountDownLatch(1);
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile DaemonState state = DaemonState.LOADING;
    private volatile Catalog catalog;
    private volatile Answers answers;
    private volatile Exception loadError;
    private volatile String stopReason;
    private volatile MetricsServer metrics;
    private volatile SeedExporter seeds;
    private final SeedStats seedStats = new SeedStats();
    /** The catalog memfd adopted from the fd store, stored again (a no-op for systemd) once ready; then closed. */
    private volatile Fd keptCatalog;
    /** The successor's pid once a handover committed: close then gives nothing up that the successor holds. */
    private volatile int handedOverTo;
    private Thread shutdownHook;
    private volatile Thread loader;

    private Daemon(Adoption a, Supervisor supervisor, DaemonContext context) {
        this.context = context;
        this.socket = context.socket();
        this.lock = a.lock();
        this.listener = a.listener();
        this.systemd = supervisor == null ? null : supervisor.notifier();
        this.keptCatalog = supervisor == null ? null : supervisor.keptCatalog();
        this.fatal = new FatalExit(lock.dir(), socket.getFileName().toString(),
                SocketPaths.readyFile(socket).getFileName().toString(), () -> systemd != null && systemd.listenerStored());
        this.services = new Services(context::admits, context::mayStop, leases, stats, fatal.threads(), fatal,
                System::nanoTime);
        this.progress = new LoadProgress(line -> {
            LOG.log(INFO, line);
            if (systemd != null) {
                systemd.status("loading: " + line);
            }
        });
        this.handover = new HandoverSender(services, context.hooks(), view);
        this.loop = new SessionLoop(services, context.limits(), listener.fd(), socket.toString(),
                new Requests(services, view, handover, Posix.geteuid()), handover, Executors.newFixedThreadPool(
                        context.limits().workers(), r -> services.threads().thread(r, "engram-worker")));
    }

    /**
     * A daemon serving what {@code adoption} brought, with systemd's part ({@code supervisor}; null: not under
     * systemd), both of which it owns from here on (closing all of it when this fails): its loop runs, its metrics
     * server listens (when asked), systemd is told, and a load, if it brought one, runs on a thread of its own.
     */
    static Daemon run(Adoption adoption, Supervisor supervisor, DaemonContext context) {
        Daemon d;
        try {
            Posix.raiseNoFileLimit();
            d = new Daemon(adoption, supervisor, context);
        } catch (RuntimeException | Error e) {
            Closer.closeAllAfter(e, adoption, supervisor);
            throw e;
        }
        try {
            d.begin(adoption, supervisor);
            return d;
        } catch (RuntimeException | Error e) {
            Closer.closeAllAfter(e, d, adoption.load());
            throw e;
        }
    }

    private void begin(Adoption a, Supervisor supervisor) {
        loop.install(a.connections());
        leases.continueFrom(a.nextLeaseId());
        progress.report(r -> a.report());
        if (a.catalog() != null) {
            progress.finish(a.catalog().totalBytes());
            becomeReady(a.catalog());
        }
        loop.start();
        if (a.catalog() == null) {
            LOG.log(INFO, "listening on " + socket + " (pid " + pid + ", backend " + context.backend().wireName() + ")");
        }
        if (context.metricsPort() > 0) { // before a load, so that /live and /ready answer during it
            metrics = MetricsServer.start(view, http -> DaemonMetrics.registry(view, http),
                    new InetSocketAddress(context.metricsAddress(), context.metricsPort()), services.threads(),
                    a.catalog() != null ? MetricsServer.AFTER_HANDOVER_RETRY_MILLIS : 0);
        }
        if (context.seed().listen() != null) { // before a load, so that a peer list naming this daemon tells it apart
            seeds = SeedExporter.start(new CatalogExport(() -> catalog,
                    context.store().device() != null ? context.store().device() : 0), context.seed(), seedStats,
                    services.threads());
        }
        if (systemd != null) {
            supervisor.staleEntries().forEach(systemd::remove);
            systemd.storeListener(listener.fd());
            systemd.startWatchdog(services.threads(), loop::heartbeatNanos);
            if (state == DaemonState.READY) {
                announceReady();
            } else {
                systemd.status("loading");
            }
        }
        if (context.ownsProcess()) {
            Thread.setDefaultUncaughtExceptionHandler(fatal);
            shutdownHook = new Thread(() -> {
                requestStop("signal");
                close();
            }, "engram-shutdown");
            Runtime.getRuntime().addShutdownHook(shutdownHook);
        }
        if (a.load() != null) {
            loader = LoadRun.start(a.load(), progress, services.threads(), context.logProgress(), systemd, new Outcome());
        }
        lock.serving(); // a start refused before here removes the lock file and directory it created
    }

    /** The address the seed exporter listens on (null: none). */
    public InetSocketAddress seedAddress() {
        SeedExporter s = seeds;
        return s == null ? null : s.address();
    }

    /** The address the metrics server listens on (null: none). */
    public InetSocketAddress metricsAddress() {
        MetricsServer m = metrics;
        return m == null ? null : m.address();
    }

    /** A load's outcome: the daemon serves the tables, or says the load failed. */
    private final class Outcome implements LoadRun.Outcome {
        @Override
        public void loaded(Catalog c) {
            synchronized (Daemon.this) {
                if (closed.get()) {
                    Closer.closeAll(c);
                    return;
                }
                try {
                    becomeReady(c);
                } catch (RuntimeException e) { // the ready file cannot be written: serve nothing
                    catalog = null;
                    Closer.closeAllAfter(e, c);
                    failed(e);
                    return;
                }
            }
            announceReady();
        }

        @Override
        public void failed(Exception e) {
            loadError = e;
            state = DaemonState.FAILED;
            settled.countDown();
        }
    }

    /** The one way to ready: the catalog's answers made, the state, the ready file with this pid. */
    private void becomeReady(Catalog c) {
        catalog = c;
        ReadyFile.write(lock.dir().fd(), SocketPaths.readyFile(socket).getFileName().toString(), pid,
                c.fingerprintSha256(), c.backend(), socket);
        answers = new Answers(c, StatusDocument::tablesJson);
        state = DaemonState.READY;
        settled.countDown();
    }

    /** The tables into systemd's fd store, then READY=1 (under systemd; nothing otherwise). */
    private void announceReady() {
        Catalog c = catalog;
        if (systemd != null && c != null) {
            Fd kept = keptCatalog;
            keptCatalog = null;
            systemd.announceReady(c, progress.report(), kept);
        }
    }

    /**
     * Blocks until the daemon is ready, or it stopped first.
     *
     * @throws Exception the load's failure, with its one line
     */
    public void awaitReady() throws Exception {
        settled.await();
        Exception e = loadError;
        if (e != null) {
            throw e;
        }
    }

    /** Blocks until a STOP request, a signal ({@link #requestStop}) or {@code close}. */
    public void awaitStop() throws InterruptedException {
        stopRequested.await();
    }

    public void requestStop(String reason) {
        if (stopReason == null) {
            stopReason = reason;
        }
        state = DaemonState.STOPPING;
        if (systemd != null && systemd.listenerStored()) {
            loop.stopAccepting(); // the socket outlives this process in the fd store: the next daemon accepts
        }
        stopRequested.countDown();
    }

    /**
     * Removes the ready file and the socket, ends every lease and frees every table; after a committed handover,
     * closes only its own copies (the socket and ready file are the successor's now). Idempotent; a second caller
     * (a signal's shutdown hook racing the main thread) waits until the first is done, so the JVM never halts
     * half-way through.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            try {
                closeDone.await(30, TimeUnit.SECONDS);
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
        int successor = handedOverTo;
        state = DaemonState.STOPPING;
        stopRequested.countDown();
        settled.countDown();
        if (successor == 0) {
            if (systemd != null) {
                systemd.stopping("stopping" + (stopReason == null ? "" : " (" + stopReason + ")"));
            }
            lock.dir().removeOwn(SocketPaths.readyFile(socket).getFileName().toString(), false);
            if (systemd == null || !systemd.listenerStored()) {
                lock.dir().removeOwn(socket.getFileName().toString(), true);
            } // else systemd's fd store keeps the listening socket: clients queue in its backlog for the next daemon
        }
        Closer.closeAll(metrics, seeds);
        Thread l = loader;
        if (l != null) {
            l.interrupt(); // a load still under way gives up where it waits; what it made is freed as it ends
        }
        if (successor > 0) {
            loop.closeHandedOver(successor);
        } else {
            loop.close();
        }
        listener.close();
        Catalog c;
        synchronized (this) {
            c = catalog;
            catalog = null;
        }
        try {
            Closer.closeAll(c);
        } catch (RuntimeException e) {
            LOG.log(WARNING, "freeing the tables failed: " + e.getMessage());
        }
        Closer.closeAll(lock, systemd, keptCatalog);
        if (shutdownHook != null && Thread.currentThread() != shutdownHook) {
            try {
                Runtime.getRuntime().removeShutdownHook(shutdownHook);
            } catch (IllegalStateException shuttingDown) {
                // the JVM is exiting: the hook runs (and waits for this close)
            }
        }
        LOG.log(INFO, "stopped" + (stopReason == null ? "" : " (" + stopReason + ")"));
    }

    public Path socket() {
        return socket;
    }

    public int pid() {
        return pid;
    }

    public DaemonState state() {
        return state;
    }

    /** How far the load has got (STATUS's {@code progress}). */
    public LoadProgress progress() {
        return progress;
    }

    /** The STATUS document (docs/protocol.md lists its fields). */
    public String statusJson() {
        return StatusDocument.of(view.facts());
    }

    /**
     * What the request handler, the handover and the metrics see of the daemon: its state and answers, and what they
     * may ask of it; nothing else.
     */
    private final class View implements Requests.Served, HandoverSender.Source, DaemonMetrics.Observed {
        @Override
        public DaemonState state() {
            return state;
        }

        @Override
        public Answers answers() {
            return answers;
        }

        @Override
        public Catalog catalog() {
            return catalog;
        }

        @Override
        public String loadingText() {
            return progress.text();
        }

        @Override
        public Welcome welcome(int version) {
            return new Welcome(version, pid, BuildInfo.version(), context.backend().wireName(), context.instanceName(), state,
                    Posix.geteuid());
        }

        StatusDocument.Facts facts() {
            Exception e = loadError;
            return new StatusDocument.Facts(state, pid, Posix.geteuid(), context.backend().wireName(),
                    context.instanceName(), socket.toString(), uptimeSeconds(), progress.snapshot(),
                    e == null ? null : String.valueOf(e.getMessage()), answers, progress.report(), leases.list(), stats,
                    context.limits(), loop.requestMemoryUsed());
        }

        @Override
        public List<Parts.Slice> status(int version) {
            return StatusDocument.reply(facts(), version);
        }

        @Override
        public void stop(String reason) {
            requestStop(reason);
        }

        @Override
        public LoadReport report() {
            return progress.report();
        }

        @Override
        public BorrowedFd listener() {
            return listener.fd();
        }

        @Override
        public Fd lock() {
            return lock.fd();
        }

        @Override
        public CompletableFuture<List<HandedConnection>> freeze(long drainMillis) {
            return loop.freeze(drainMillis);
        }

        @Override
        public void resume() {
            lock.claim(); // a successor that failed before the commit point may have written its pid
            loop.resume();
        }

        @Override
        public void handedOver(int successor) {
            handedOverTo = successor;
            requestStop("handed over to pid " + successor);
        }

        @Override
        public double uptimeSeconds() {
            return (System.nanoTime() - startNanos) / 1e9;
        }

        @Override
        public long heartbeatNanos() {
            return loop.heartbeatNanos();
        }

        @Override
        public LoadProgress progress() {
            return progress;
        }

        @Override
        public Leases leases() {
            return leases;
        }

        @Override
        public ConnectionStats stats() {
            return stats;
        }

        @Override
        public long requestMemoryUsed() {
            return loop.requestMemoryUsed();
        }

        @Override
        public SeedStats seedStats() {
            return seedStats;
        }
    }
}
