package io.engramhost.util;

/**
 * A lap timer on {@link System#nanoTime()}: {@link #lap()} returns the nanoseconds since the previous
 * lap (or the start) and starts the next one; {@link #total()} the nanoseconds since the start. It
 * keeps timing out of the way of the code it times:
 *
 * <pre>{@code
 * Lap lap = Lap.start();
 * connect();
 * long connectNanos = lap.lap();
 * handshake();
 * long handshakeNanos = lap.lap();
 * long totalNanos = lap.total();
 * }</pre>
 *
 * Not thread-safe: one thread times its own steps.
 */
public final class Lap {
    private final long start;
    private long last;

    private Lap(long now) {
        this.start = now;
        this.last = now;
    }

    /** A timer started now. */
    public static Lap start() {
        return new Lap(System.nanoTime());
    }

    /** The nanoseconds since the previous lap (or the start); the next lap starts now. */
    public long lap() {
        long now = System.nanoTime();
        long d = now - last;
        last = now;
        return d;
    }

    /** The nanoseconds since the start; the current lap goes on. */
    public long total() {
        return System.nanoTime() - start;
    }

    /** Milliseconds, as the timing maps and JSON documents report them. */
    public static double millis(long nanos) {
        return nanos / 1e6;
    }

    /** Seconds, as the daemon's STATUS reports its load. */
    public static double seconds(long nanos) {
        return nanos / 1e9;
    }
}
