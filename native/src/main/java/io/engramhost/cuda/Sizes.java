package io.engramhost.cuda;

import java.util.Locale;

/** Byte counts for messages: {@code 16.0 GiB}, {@code 2.0 MiB}, {@code 100 B}. */
public final class Sizes {
    public static final long KiB = 1L << 10;
    public static final long MiB = 1L << 20;
    public static final long GiB = 1L << 30;
    public static final long TiB = 1L << 40;

    private Sizes() {
    }

    public static String format(long bytes) {
        if (bytes < KiB) {
            return bytes + " B";
        }
        String[] units = {"KiB", "MiB", "GiB", "TiB", "PiB"};
        double v = bytes;
        int u = -1;
        while (v >= 1024 && u < units.length - 1) {
            v /= 1024;
            u++;
        }
        return String.format(Locale.ROOT, "%.1f %s", v, units[u]);
    }

    /** {@code value} rounded up to a multiple of {@code granularity} (a power of two or not). */
    public static long roundUp(long value, long granularity) {
        if (granularity <= 0) {
            throw new IllegalArgumentException("granularity must be positive, was " + granularity);
        }
        long r = value % granularity;
        return r == 0 ? value : Math.addExact(value, granularity - r);
    }
}
