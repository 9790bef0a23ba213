package io.engramhost.store;

import io.engramhost.util.Bytes;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.UnaryOperator;

/**
 * How far a load has got, and what it measured: read by STATUS while the load runs. A load goes
 * through phases, each with a short stable name (STATUS's {@code progress.phase}: {@code read} (the regions
 * created and the checkpoint read into them and digested, overlapped), {@code verify}, {@code device},
 * {@code check}; {@code starting} before and {@code loaded} after) and a detail for people ("creating 3 memfd
 * regions and loading 4 tensors into them with 16 threads"). Each new phase is one
 * line to {@code log} (the daemon passes its log), written before the phase changes, so whoever draws
 * the progress sees the phase that ended at its last count.
 */
public final class LoadProgress {
    /** Every phase name a load goes through, in order (docs/protocol.md, STATUS). */
    public static final String STARTING = "starting";
    /** The host tables filled from peers ({@code serve --seed-from}), before any are read from the disk. */
    public static final String SEED = "seed";
    public static final String READ = "read";
    public static final String VERIFY = "verify";
    public static final String DEVICE = "device";
    public static final String CHECK = "check";
    public static final String LOADED = "loaded";

    /** One consistent reading: the phase, its detail, bytes done of total, and when the phase began. */
    public record Snapshot(String phase, String detail, long done, long total, long phaseStartNanos) {
        /** Seconds since the phase began. */
        public double seconds() {
            return (System.nanoTime() - phaseStartNanos) / 1e9;
        }
    }

    private final Consumer<String> log;
    private final Object lock = new Object();
    private volatile String phase = STARTING;
    private volatile String detail = STARTING;
    private final AtomicLong done = new AtomicLong();
    private volatile long total;
    private volatile long phaseStart = System.nanoTime();
    private LoadReport report = LoadReport.EMPTY;
    private LoadTimings loadTimings;

    public LoadProgress(Consumer<String> log) {
        this.log = log;
    }

    /**
     * A new phase {@code name} ({@link #READ}...) of {@code totalBytes} (0: not counted in bytes);
     * {@code detail} is what the log line and {@link #text()} say.
     */
    public void phase(String name, String detail, long totalBytes) {
        // Logged before the switch, outside the lock: a live progress line ends on the phase that ended.
        log.accept(detail + (totalBytes > 0 ? " (" + Bytes.format(totalBytes) + ")" : ""));
        synchronized (lock) {
            this.phase = name;
            this.detail = detail;
            this.total = totalBytes;
            this.phaseStart = System.nanoTime();
            done.set(0);
        }
    }

    /** The load is over: {@code bytes} were loaded. Not logged (the daemon logs "ready"). */
    public void finish(long bytes) {
        synchronized (lock) {
            this.phase = LOADED;
            this.detail = LOADED;
            this.total = bytes;
            done.set(bytes);
        }
    }

    public void advance(long bytes) {
        done.addAndGet(bytes);
    }

    /** Sets the bytes done; reports may arrive out of order from several threads, so it only grows. */
    public void done(long bytes) {
        done.accumulateAndGet(bytes, Math::max);
    }

    /** Records the host tables' load timings: STATUS's {@code load} object. */
    public synchronized void loadTimings(LoadTimings timings) {
        this.loadTimings = timings;
        report = report.withLoad(timings.toReport());
    }

    /** The host tables' load timings, or null before they are loaded. */
    public synchronized LoadTimings loadTimings() {
        return loadTimings;
    }

    /** Records what the load found out (the placement, the load's threads, the GPU tensors...) for STATUS. */
    public synchronized void report(UnaryOperator<LoadReport> change) {
        report = change.apply(report);
    }

    /** What the load has found out so far. */
    public synchronized LoadReport report() {
        return report;
    }

    /** The phase's short name: {@link #READ}, {@link #VERIFY}... */
    public String phase() {
        return phase;
    }

    /** What the phase does, for people: "creating 3 memfd regions". */
    public String detail() {
        return detail;
    }

    public long bytesDone() {
        return done.get();
    }

    public long bytesTotal() {
        return total;
    }

    /** The phase, its bytes and its start, read together (never a count of one phase with the total of another). */
    public Snapshot snapshot() {
        synchronized (lock) {
            return new Snapshot(phase, detail, Math.min(done.get(), Math.max(total, done.get())), total, phaseStart);
        }
    }

    public String text() {
        Snapshot s = snapshot();
        long t = s.total();
        return s.detail() + (t > 0 ? String.format(" %.0f%% (%s of %s, %s)", 100.0 * s.done() / t,
                Bytes.format(s.done()), Bytes.format(t), Bytes.gibPerSecond(s.done(), s.seconds())) : "");
    }
}
