package io.engramhost.util;

import java.util.List;

/**
 * The one owner of the arithmetic of region runs (docs/protocol.md, "A table over several regions"): how the daemon
 * cuts a table longer than its largest region ({@code maxRegion}, cuda-vmm's {@code --region-max}) into a run of
 * regions, each {@code maxRegion} bytes but the last, which holds the rest rounded up to the granule; and how a
 * client finds, from the region sizes of a manifest laid back to back, the last region a table reaches. The cases
 * are data, conformance/region-runs.json, which the Java and C tests iterate.
 */
public final class RegionRuns {
    private RegionRuns() {
    }

    /** Whether a table of {@code length} bytes lies in a run: {@code maxRegion} is above 0 and it is longer. */
    public static boolean isRun(long length, long maxRegion) {
        return maxRegion > 0 && length > maxRegion;
    }

    /** The regions a table of {@code length} bytes lies in: 0 for an empty one, 1 unless it lies in a run. */
    public static long count(long length, long maxRegion) {
        if (length <= 0) {
            return 0;
        }
        return isRun(length, maxRegion) ? (length - 1) / maxRegion + 1 : 1;
    }

    /**
     * The regions of the runs of these tables, counted without listing them: what the load checks against the
     * manifest's limit before it plans, so that a huge (sparse) file's table cannot fill the heap with its regions.
     */
    public static long runRegions(List<Long> lengths, long maxRegion) {
        long regions = 0;
        for (long length : lengths) {
            regions += isRun(length, maxRegion) ? count(length, maxRegion) : 0;
        }
        return regions;
    }

    /** The first byte of the table that region {@code k} of its run holds. */
    public static long start(long k, long maxRegion) {
        return k * maxRegion;
    }

    /**
     * The byte after the last of the table that region {@code k} of its run holds (of a table not in a run, its
     * length).
     */
    public static long end(long k, long length, long maxRegion) {
        if (!isRun(length, maxRegion)) {
            return length;
        }
        long start = start(k, maxRegion);
        return start + Math.min(maxRegion, length - start); // not start + maxRegion: the last run's may pass 2^63
    }

    /** Which region of its run, counted from the run's first, holds byte {@code at} of a table in a run. */
    public static int indexOf(long at, long maxRegion) {
        return (int) (at / maxRegion);
    }

    /** The size of region {@code k} of the run: the table's bytes it holds rounded up to the granule. */
    public static long size(long k, long length, long maxRegion, long granule) {
        return roundUp(end(k, length, maxRegion) - start(k, maxRegion), granule);
    }

    /**
     * {@code bytes} (at least 1) rounded up to a multiple of {@code granule}; a size that would pass the largest long
     * is refused.
     */
    public static long roundUp(long bytes, long granule) {
        long b = Math.max(bytes, 1);
        if (b > Long.MAX_VALUE - (granule - 1)) {
            throw new IllegalArgumentException(b + " bytes rounded up to a multiple of " + granule
                    + " pass the largest size, " + Long.MAX_VALUE);
        }
        return (b + granule - 1) / granule * granule;
    }

    /**
     * A manifest's regions laid back to back, as a client checks a table's run against them: where each region ends
     * (saturating at Long.MAX_VALUE), and by bisection the last region a table reaches.
     */
    public static final class Ends {
        private final long[] ends;

        /** The ends of regions of these sizes, laid back to back. */
        public Ends(long[] sizes) {
            ends = new long[sizes.length];
            long at = 0;
            for (int i = 0; i < sizes.length; i++) {
                at = at > Long.MAX_VALUE - sizes[i] ? Long.MAX_VALUE : at + sizes[i];
                ends[i] = at;
            }
        }

        /** Where the table's bytes end, counted from the first region's start; Long.MAX_VALUE when past it. */
        private long end(int region, long offset, long bytes) {
            long start = region == 0 ? 0 : ends[region - 1];
            start = start > Long.MAX_VALUE - offset ? Long.MAX_VALUE : start + offset;
            return start > Long.MAX_VALUE - bytes ? Long.MAX_VALUE : start + bytes;
        }

        /**
         * The last region a table of {@code bytes} at {@code offset} (at most the region's size) in {@code region}
         * reaches, or -1 when it runs past the last region.
         */
        public int last(int region, long offset, long bytes) {
            long end = end(region, offset, bytes);
            if (end > ends[ends.length - 1] || end == Long.MAX_VALUE) {
                return -1;
            }
            int lo = region;
            int hi = ends.length - 1;
            while (lo < hi) { // the first region whose end is at or past the table's
                int mid = (lo + hi) >>> 1;
                if (ends[mid] >= end) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            return lo;
        }

        /** The bytes of a table that runs past the last region which no region holds (0 when none). */
        public long lacking(int region, long offset, long bytes) {
            long start = (region == 0 ? 0 : ends[region - 1]) + offset; // within the first region: no overflow
            return Math.max(0, bytes - (ends[ends.length - 1] - start));
        }
    }
}
