package io.engramhost.numa;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;

/**
 * The kernel's list format for CPUs and nodes ({@code cpulist}, {@code online}, {@code has_memory}):
 * comma-separated ids and inclusive ranges, e.g. {@code 0-55,112-167}. An empty text is an empty list.
 */
public final class CpuList {
    /** Larger than any CPU or node id a kernel hands out (NR_CPUS tops out at 8192). */
    private static final int MAX_ID = 1 << 16;

    private CpuList() {
    }

    /**
     * Parses {@code text}; {@code source} names the file in errors. Returns the ids in ascending order,
     * each once.
     */
    public static List<Integer> parse(String text, Path source) {
        BitSet ids = new BitSet();
        String trimmed = text.strip();
        if (!trimmed.isEmpty()) {
            for (String part : trimmed.split(",", -1)) {
                String p = part.strip();
                int dash = p.indexOf('-');
                int lo = id(dash < 0 ? p : p.substring(0, dash), text, source);
                int hi = dash < 0 ? lo : id(p.substring(dash + 1), text, source);
                if (hi < lo) {
                    throw bad(text, source, "range '" + p + "' runs backwards");
                }
                ids.set(lo, hi + 1);
            }
        }
        List<Integer> out = new ArrayList<>(ids.cardinality());
        ids.stream().forEach(out::add);
        return List.copyOf(out);
    }

    /** The list format of {@code ids} (ascending or not): {@code 0-3,8-11}; empty for none. */
    public static String format(Iterable<Integer> ids) {
        BitSet set = new BitSet();
        ids.forEach(set::set);
        StringBuilder sb = new StringBuilder();
        int lo = set.nextSetBit(0);
        while (lo >= 0) {
            int hi = set.nextClearBit(lo) - 1;
            if (sb.length() > 0) {
                sb.append(',');
            }
            sb.append(lo);
            if (hi > lo) {
                sb.append('-').append(hi);
            }
            lo = set.nextSetBit(hi + 1);
        }
        return sb.toString();
    }

    private static int id(String s, String text, Path source) {
        if (s.isEmpty() || !s.chars().allMatch(Character::isDigit)) {
            throw bad(text, source, "'" + s + "' is not a number");
        }
        if (s.length() > 6 || Integer.parseInt(s) >= MAX_ID) {
            throw bad(text, source, "id " + s + " is out of range");
        }
        return Integer.parseInt(s);
    }

    private static NumaException bad(String text, Path source, String why) {
        return new NumaException(source + ": malformed CPU/node list '" + text.strip() + "': " + why
                + " (expected e.g. 0-3,8-11)");
    }
}
