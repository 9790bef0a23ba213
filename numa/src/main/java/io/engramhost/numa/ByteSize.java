package io.engramhost.numa;

import java.util.Locale;

/** Byte counts for messages: {@code 189.0 GiB}, {@code 2 MiB}. */
public final class ByteSize {
    private static final long KIB = 1024;
    private static final long MIB = KIB * 1024;
    private static final long GIB = MIB * 1024;

    private ByteSize() {
    }

    /** One decimal in the largest unit that keeps the value at least 1: {@code 120.3 GiB}, {@code 512.0 KiB}. */
    public static String format(long bytes) {
        long abs = Math.abs(bytes);
        if (abs >= GIB) {
            return String.format(Locale.ROOT, "%.1f GiB", bytes / (double) GIB);
        }
        if (abs >= MIB) {
            return String.format(Locale.ROOT, "%.1f MiB", bytes / (double) MIB);
        }
        if (abs >= KIB) {
            return String.format(Locale.ROOT, "%.1f KiB", bytes / (double) KIB);
        }
        return bytes + " B";
    }

    /** A page size as people say it: {@code 4 KiB}, {@code 2 MiB}, {@code 1 GiB}. */
    public static String pageSize(long bytes) {
        if (bytes >= GIB && bytes % GIB == 0) {
            return bytes / GIB + " GiB";
        }
        if (bytes >= MIB && bytes % MIB == 0) {
            return bytes / MIB + " MiB";
        }
        if (bytes >= KIB && bytes % KIB == 0) {
            return bytes / KIB + " KiB";
        }
        return bytes + " B";
    }
}
