package io.engramhost.util;

import java.util.Locale;

/** Byte counts for people and messages: {@code 16.0 GiB}, {@code 2 MiB}, {@code 100 B}; and page arithmetic. */
public final class Bytes {
    public static final long KiB = 1L << 10;
    public static final long MiB = 1L << 20;
    public static final long GiB = 1L << 30;
    public static final long TiB = 1L << 40;

    private static final String[] UNITS = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

    private Bytes() {
    }

    /**
     * One decimal in the largest binary unit that keeps the value at least 1: {@code 100 B},
     * {@code 512.0 KiB}, {@code 189.0 GiB}, {@code -1.5 GiB}.
     */
    public static String format(long bytes) {
        double v = Math.abs((double) bytes);
        if (v < KiB) {
            return bytes + " B";
        }
        int u = -1;
        while (v >= KiB && u < UNITS.length - 1) {
            v /= KiB;
            u++;
        }
        return String.format(Locale.ROOT, "%s%.1f %s", bytes < 0 ? "-" : "", v, UNITS[u]);
    }

    /**
     * A size as people say it when it is a whole number of a unit, e.g. a page size: {@code 4 KiB},
     * {@code 64 KiB}, {@code 2 MiB}, {@code 512 MiB}, {@code 1 GiB}; otherwise in bytes ({@code 5000 B}).
     */
    public static String exact(long bytes) {
        if (bytes != 0) {
            for (int u = UNITS.length - 1; u >= 0; u--) {
                long unit = 1L << (10 * (u + 1));
                if (bytes % unit == 0) {
                    return bytes / unit + " " + UNITS[u];
                }
            }
        }
        return bytes + " B";
    }

    /** A rate in GiB/s with two decimals, {@code 12.34 GiB/s}; {@code -} when no time passed. */
    public static String gibPerSecond(long bytes, double seconds) {
        return seconds <= 0 ? "-" : String.format(Locale.ROOT, "%.2f GiB/s", bytes / seconds / GiB);
    }

    /** {@code value} rounded up to a multiple of {@code granularity} (a power of two or not); throws on overflow. */
    public static long roundUp(long value, long granularity) {
        if (granularity <= 0) {
            throw new IllegalArgumentException("granularity must be positive, was " + granularity);
        }
        long r = Math.floorMod(value, granularity);
        return r == 0 ? value : Math.addExact(value, granularity - r);
    }
}
