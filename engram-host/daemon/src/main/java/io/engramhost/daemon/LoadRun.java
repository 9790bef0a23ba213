package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;

import io.engramhost.daemon.systemd.SystemdNotify;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadProgress;
import io.engramhost.store.LoadReport;
import io.engramhost.util.Bytes;
import io.engramhost.util.Threads;
import java.lang.management.ManagementFactory;

/**
 * A daemon's load, on a thread of its own: the builder runs while a ticker says how far it is every
 * {@link #PROGRESS_LOG_MILLIS} (a log line, unless the caller draws its own, and systemd's STATUS=), and what it
 * ends with, the catalog or the failure, goes to the daemon ({@link Outcome}).
 */
final class LoadRun {
    private static final System.Logger LOG = System.getLogger(LoadRun.class.getName());
    /** How often a running load logs its progress. */
    static final long PROGRESS_LOG_MILLIS = 5000;

    /** Where the load's end goes. */
    interface Outcome {
        /** The tables are loaded ({@code progress}'s report says how long it took); the daemon may serve them. */
        void loaded(Catalog catalog);

        void failed(Exception e);
    }

    private LoadRun() {
    }

    /** Starts the load's thread ({@code engram-load}) and returns it. */
    static Thread start(CatalogBuilder builder, LoadProgress progress, Threads threads, boolean log,
            SystemdNotify systemd, Outcome outcome) {
        Thread t = threads.thread(() -> run(builder, progress, threads, log, systemd, outcome), "engram-load");
        t.start();
        return t;
    }

    private static void run(CatalogBuilder builder, LoadProgress progress, Threads threads, boolean log,
            SystemdNotify systemd, Outcome outcome) {
        long t0 = System.nanoTime();
        Thread ticker = threads.thread(() -> tick(progress, log, systemd), "engram-progress");
        ticker.start();
        Catalog c;
        try {
            c = builder.build(progress);
        } catch (Exception e) {
            if (systemd != null) {
                systemd.status("load failed: " + e.getMessage());
            }
            outcome.failed(e);
            return;
        } finally {
            ticker.interrupt();
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        double sinceStart = ManagementFactory.getRuntimeMXBean().getUptime() / 1e3; // the JVM's start, within ms
        double rate = sinceStart > 0 ? c.totalBytes() / (double) (1L << 30) / sinceStart : 0.0;
        progress.finish(c.totalBytes());
        progress.report(r -> r.withReady(seconds, sinceStart, rate).withOrigin(r.origin() != null
                && r.origin().seeded() != null ? LoadReport.Origin.seeded(c.totalBytes(), r.origin().seeded())
                : LoadReport.Origin.load(c.totalBytes())));
        LOG.log(INFO, "ready: " + c.allTables().size() + " tables, " + Bytes.format(c.totalBytes()) + " in "
                + c.regionCount() + (c.regionCount() == 1 ? " region" : " regions") + ", after "
                + String.format("%.2f s (%.2f s from the process's start, %.2f GiB/s)", seconds, sinceStart, rate)
                + "; fingerprint " + c.fingerprintSha256());
        outcome.loaded(c);
    }

    private static void tick(LoadProgress progress, boolean log, SystemdNotify systemd) {
        if (!log && systemd == null) {
            return;
        }
        try {
            while (true) {
                Thread.sleep(PROGRESS_LOG_MILLIS);
                if (log) {
                    LOG.log(INFO, progress.text());
                }
                if (systemd != null) {
                    systemd.status("loading: " + progress.text());
                }
            }
        } catch (InterruptedException done) {
            // the load is over
        }
    }
}
