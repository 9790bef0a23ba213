package io.engramhost.util;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Byte counts for people and messages: {@code 16.0 GiB}, {@code 2 MiB}, {@code 100 B}; and page arithmetic. */
public final class Bytes {
    public static final long KiB = 1L << 10;
    public static final long MiB = 1L << 20;
    public static final long GiB = 1L << 30;
    public static final long TiB = 1L << 40;

    private static final String[] UNITS = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    private static final Pattern SIZE = Pattern.compile("([0-9]+(?:\\.[0-9]+)?)\\s*([A-Za-z]*)");
    /** The units {@link #parse} takes, lower-cased: all powers of 1024. */
    private static final Map<String, Long> PARSE_UNITS = Map.ofEntries(Map.entry("", 1L), Map.entry("b", 1L),
            Map.entry("k", KiB), Map.entry("kib", KiB), Map.entry("m", MiB), Map.entry("mib", MiB),
            Map.entry("g", GiB), Map.entry("gib", GiB), Map.entry("t", TiB), Map.entry("tib", TiB),
            Map.entry("p", 1L << 50), Map.entry("pib", 1L << 50));

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

    /**
     * A size as an operator writes it, in bytes: a number of bytes ({@code 4096}, {@code 4096B}) or a number, whole or
     * with a fraction, and a unit, all powers of 1024 and in any case: {@code K}/{@code KiB}, {@code M}/{@code MiB},
     * {@code G}/{@code GiB}, {@code T}/{@code TiB}, {@code P}/{@code PiB} ({@code 120G}, {@code 120GiB}, {@code 1.5t},
     * {@code 512 MiB}). A fraction of a byte is dropped. {@code KB}, {@code GB} and the like are refused: they mean
     * 10^3 and 10^9 to some and 2^10 and 2^30 to others. Throws {@link IllegalArgumentException} with a message that
     * quotes {@code text} (the caller names the option) for anything else, for 0 or less and for more than
     * {@link Long#MAX_VALUE} bytes.
     */
    public static long parse(String text) {
        String t = text == null ? "" : text.strip();
        if (t.startsWith("-")) {
            throw new IllegalArgumentException("'" + t + "' is not a positive size");
        }
        Matcher m = SIZE.matcher(t);
        Long unit = m.matches() ? PARSE_UNITS.get(m.group(2).toLowerCase(Locale.ROOT)) : null;
        if (unit == null) {
            String suffix = m.matches() ? m.group(2).toLowerCase(Locale.ROOT) : "";
            if (suffix.length() == 2 && suffix.charAt(1) == 'b' && "kmgtp".indexOf(suffix.charAt(0)) >= 0) {
                throw new IllegalArgumentException("'" + t + "' is not a size: " + m.group(2) + " means powers of 1000"
                        + " to some and of 1024 to others; write " + m.group(1) + m.group(2).charAt(0) + " or "
                        + m.group(1) + m.group(2).toUpperCase(Locale.ROOT).charAt(0) + "iB (powers of 1024)");
            }
            throw new IllegalArgumentException("'" + t + "' is not a size: give bytes, or a number and a unit as in"
                    + " 120G, 120GiB, 1.5T or 512M (K, M, G, T, P or KiB ... PiB, powers of 1024)");
        }
        BigInteger bytes = new BigDecimal(m.group(1)).multiply(BigDecimal.valueOf(unit)).toBigInteger();
        if (bytes.signum() == 0) {
            throw new IllegalArgumentException("'" + t + "' is not a positive size");
        }
        if (bytes.bitLength() > 63) {
            throw new IllegalArgumentException("'" + t + "' is over the largest size, " + format(Long.MAX_VALUE));
        }
        return bytes.longValue();
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
