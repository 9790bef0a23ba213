package io.engramhost.store;

import io.engramhost.util.Bytes;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * How far a load has got, and what it measured: read by STATUS while the load runs. Each new phase
 * is one line to {@code log} (the daemon passes its log).
 */
public final class LoadProgress {
    private final Consumer<String> log;
    private volatile String phase = "starting";
    private final AtomicLong done = new AtomicLong();
    private volatile long total;
    private volatile long phaseStart = System.nanoTime();
    private final Map<String, Object> facts = new LinkedHashMap<>();
    private LoadTimings loadTimings;

    public LoadProgress(Consumer<String> log) {
        this.log = log;
    }

    public void phase(String phase, long totalBytes) {
        this.phase = phase;
        this.total = totalBytes;
        this.phaseStart = System.nanoTime();
        done.set(0);
        log.accept(phase + (totalBytes > 0 ? " (" + Bytes.format(totalBytes) + ")" : ""));
    }

    /** The load is over: {@code bytes} were loaded. Not logged (the daemon logs "ready"). */
    public void finish(long bytes) {
        this.phase = "loaded";
        this.total = bytes;
        done.set(bytes);
    }

    public void advance(long bytes) {
        done.addAndGet(bytes);
    }

    /** Sets the bytes done; reports may arrive out of order from several threads, so it only grows. */
    public void done(long bytes) {
        done.accumulateAndGet(bytes, Math::max);
    }

    /** Records the host tables' load timings: STATUS's {@code load} object ({@link LoadTimings#toMap()}). */
    public synchronized void loadTimings(LoadTimings timings) {
        this.loadTimings = timings;
        facts.put("load", timings.toMap());
    }

    /** The host tables' load timings, or null before they are loaded. */
    public synchronized LoadTimings loadTimings() {
        return loadTimings;
    }

    /** Records a fact for status: a timing, the placement, the GPU tensors... */
    public synchronized void put(String key, Object value) {
        facts.put(key, value);
    }

    public synchronized Map<String, Object> facts() {
        return new LinkedHashMap<>(facts);
    }

    public String phase() {
        return phase;
    }

    public long bytesDone() {
        return done.get();
    }

    public long bytesTotal() {
        return total;
    }

    public String text() {
        long t = total;
        double seconds = (System.nanoTime() - phaseStart) / 1e9;
        return phase + (t > 0 ? String.format(" %.0f%% (%s of %s, %s)", 100.0 * done.get() / t, Bytes.format(done.get()),
                Bytes.format(t), Bytes.gibPerSecond(done.get(), seconds)) : "");
    }
}
