package io.engramhost.daemon;

import io.engramhost.json.JsonWriter;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadProgress;
import io.engramhost.store.Units;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The daemon's conductor: owns the lock, the listening socket, the accept loop, the workers, the
 * leases and the catalog, and tears them down in reverse order. The socket answers (status, "not
 * ready") from the moment it exists; the ready file appears only once every table is loaded.
 */
public final class Daemon implements AutoCloseable {
    public static final String VERSION = "0.1.0";
    /** How often a running load logs its progress. */
    static final long PROGRESS_LOG_MILLIS = 5000;

    private final DaemonContext context;
    private final Path socket;
    private final DaemonLock lock;
    private final UnixListener listener;
    private final Leases leases = new Leases();
    private final ExecutorService workers;
    private final Thread acceptor;
    private final Thread leaseWatcher;
    private final LoadProgress progress = new LoadProgress(DaemonLog::info);
    private final CountDownLatch stopRequested = new CountDownLatch(1);
    private final AtomicBoolean closed = new AtomicBoolean();
    private final long startNanos = System.nanoTime();
    private final int pid = Posix.getpid();
    private volatile DaemonState state = DaemonState.LOADING;
    private volatile Catalog catalog;
    private volatile String stopReason;
    private volatile String failure;

    private Daemon(DaemonContext context, Path socket, DaemonLock lock, UnixListener listener) {
        this.context = context;
        this.socket = socket;
        this.lock = lock;
        this.listener = listener;
        this.workers = Executors.newFixedThreadPool(8, r -> daemonThread(r, "engram-session"));
        this.acceptor = daemonThread(this::acceptLoop, "engram-acceptor");
        this.leaseWatcher = daemonThread(leases, "engram-leases");
    }

    private static Thread daemonThread(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /**
     * Takes the socket path (refusing when a live daemon owns it, cleaning files a dead one left),
     * listens, and starts answering in state {@code loading}.
     */
    public static Daemon start(DaemonContext context, Path socket) {
        RuntimeDir.prepare(socket.getParent(), !context.allowUids().isEmpty());
        DaemonLock lock = DaemonLock.acquire(SocketPaths.lockFile(socket), socket);
        UnixListener listener = null;
        try {
            Path ready = SocketPaths.readyFile(socket);
            for (Path stale : List.of(socket, ready)) {
                if (Files.deleteIfExists(stale)) {
                    DaemonLog.info("removed " + stale + ", left by a daemon that is gone");
                }
            }
            listener = UnixListener.bind(socket, 128);
            Files.setPosixFilePermissions(socket,
                    PosixFilePermissions.fromString(context.allowUids().isEmpty() ? "rw-------" : "rw-rw-rw-"));
            Posix.raiseNoFileLimit();
            Daemon d = new Daemon(context, socket, lock, listener);
            d.acceptor.start();
            d.leaseWatcher.start();
            DaemonLog.info("listening on " + socket + " (pid " + d.pid + ", backend " + context.backend() + ")");
            return d;
        } catch (IOException | RuntimeException e) {
            if (listener != null) {
                listener.close();
                deleteQuietly(socket);
            }
            lock.close();
            if (e instanceof RuntimeException r) {
                throw r;
            }
            throw new IllegalStateException("cannot start on " + socket + ": " + e, e);
        }
    }

    /** Loads the catalog; on success the daemon is ready and the ready file is written. */
    public void load(CatalogBuilder builder) throws Exception {
        long t0 = System.nanoTime();
        Thread ticker = daemonThread(() -> {
            try {
                while (true) {
                    Thread.sleep(PROGRESS_LOG_MILLIS);
                    DaemonLog.info(progress.text());
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
            throw e;
        } finally {
            ticker.interrupt();
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        progress.finish(catalog.totalBytes());
        progress.put("ready_s", seconds);
        state = DaemonState.READY;
        ReadyFile.write(SocketPaths.readyFile(socket), pid, catalog.fingerprintSha256(), catalog.backend(), socket);
        DaemonLog.info("ready: " + catalog.allTables().size() + " tables, " + Units.bytes(catalog.totalBytes())
                + " in " + catalog.regionCount() + (catalog.regionCount() == 1 ? " region" : " regions") + ", after " + String.format("%.2f s", seconds)
                + "; fingerprint " + catalog.fingerprintSha256());
    }

    private void acceptLoop() {
        while (!closed.get()) {
            try {
                UnixConnection c = listener.accept(200);
                if (c != null) {
                    workers.execute(new Session(c, this, context.requestTimeoutMillis()));
                }
            } catch (RuntimeException e) {
                if (!closed.get()) {
                    DaemonLog.warn("accept failed: " + e.getMessage());
                    sleepQuietly(100);
                }
            }
        }
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

    /** Removes the ready file and the socket, ends every lease and frees every table. Idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        state = DaemonState.STOPPING;
        stopRequested.countDown();
        deleteQuietly(SocketPaths.readyFile(socket));
        deleteQuietly(socket);
        listener.close();
        join(acceptor);
        workers.shutdownNow();
        try {
            workers.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        leases.stop();
        join(leaseWatcher);
        leases.closeAll();
        Catalog c = catalog;
        catalog = null;
        if (c != null) {
            try {
                c.close();
            } catch (Exception e) {
                DaemonLog.warn("freeing the tables failed: " + e.getMessage());
            }
        }
        lock.close();
        DaemonLog.info("stopped" + (stopReason == null ? "" : " (" + stopReason + ")"));
    }

    private static void join(Thread t) {
        try {
            t.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void deleteQuietly(Path p) {
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            DaemonLog.warn("cannot remove " + p + ": " + e.getMessage());
        }
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
        return Posix.getuid();
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

    public String progressText() {
        return progress.text();
    }

    /** The STATUS document (docs/protocol.md lists its fields). */
    public String statusJson() {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("state", state.wireName());
        s.put("pid", pid);
        s.put("version", VERSION);
        s.put("backend", context.backend());
        s.put("instance", context.instanceName());
        s.put("socket", socket.toString());
        s.put("uptime_s", (System.nanoTime() - startNanos) / 1e9);
        Map<String, Object> p = new LinkedHashMap<>();
        p.put("phase", progress.phase());
        p.put("bytes_done", progress.bytesDone());
        p.put("bytes_total", progress.bytesTotal());
        s.put("progress", p);
        if (failure != null) {
            s.put("error", failure);
        }
        Catalog c = catalog;
        if (c != null) {
            s.put("fingerprint", c.fingerprintSha256());
            s.put("bytes", c.totalBytes());
            s.put("regions", c.regionCount());
            List<Object> tables = new ArrayList<>();
            for (Manifest.Table t : c.allTables()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("name", t.name());
                m.put("dtype", t.dtype());
                List<Object> shape = new ArrayList<>();
                for (long d : t.shape()) {
                    shape.add(d);
                }
                m.put("shape", shape);
                m.put("bytes", t.bytes());
                m.put("backend", t.kind().backend());
                m.put("numa_node", t.numaNode());
                m.put("device", t.device());
                m.put("digest", String.format("%016x", t.digest()));
                tables.add(m);
            }
            s.put("tables", tables);
        }
        s.putAll(progress.facts());
        List<Object> ls = new ArrayList<>();
        for (Leases.Lease l : leases.list()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("id", l.id());
            m.put("pid", l.peer().pid());
            m.put("uid", l.peer().uid());
            m.put("since", l.since().toString());
            ls.add(m);
        }
        s.put("leases", ls);
        return JsonWriter.write(s);
    }
}
