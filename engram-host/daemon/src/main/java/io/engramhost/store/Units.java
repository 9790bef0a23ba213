package io.engramhost.store;

import java.util.Locale;

/** Human-readable sizes and rates for logs and tables. */
public final class Units {
    private Units() {
    }

    public static String bytes(long b) {
        if (b < 1024) {
            return b + " B";
        }
        String[] units = {"KiB", "MiB", "GiB", "TiB"};
        double v = b;
        int u = -1;
        while (v >= 1024 && u < units.length - 1) {
            v /= 1024;
            u++;
        }
        return String.format(Locale.ROOT, "%.1f %s", v, units[u]);
    }

    public static String millis(double seconds) {
        return String.format(Locale.ROOT, "%.1f ms", seconds * 1e3);
    }

    public static String gibPerSecond(long bytes, double seconds) {
        return seconds <= 0 ? "-" : String.format(Locale.ROOT, "%.2f GiB/s", bytes / seconds / (1L << 30));
    }
}
