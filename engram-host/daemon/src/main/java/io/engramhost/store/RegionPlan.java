package io.engramhost.store;

import io.engramhost.memfd.PageKind;
import io.engramhost.util.RegionRuns;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Where each of a list of byte ranges goes: which region (memfd) and at which offset. Large items get
 * a region of their own; small ones are packed, at aligned offsets, into shared regions, so the number
 * of fds follows the number of regions rather than the number of tensors. Empty items get no region.
 */
public final class RegionPlan {
    /**
     * An item's place: region index (-1 for an empty item), byte offset in it, and how many regions it lies in: 1, or
     * for an item over a run of regions (longer than the plan's {@code maxRegion}) the count of consecutive regions
     * from {@code region} on, each {@code maxRegion} bytes but the last, the item at offset 0 (docs/protocol.md).
     */
    public record Slot(int region, long offset, long length, int regions) {
        public Slot(int region, long offset, long length) {
            this(region, offset, length, region < 0 ? 0 : 1);
        }

        /** The region holding byte {@code at} of the item, for an item over a run of regions of {@code maxRegion}. */
        public int regionAt(long at, long maxRegion) {
            return regions <= 1 ? region : region + RegionRuns.indexOf(at, maxRegion);
        }
    }

    private final List<Long> regionSizes;
    private final List<Slot> slots;

    private RegionPlan(List<Long> regionSizes, List<Slot> slots) {
        this.regionSizes = Collections.unmodifiableList(regionSizes);
        this.slots = Collections.unmodifiableList(slots);
    }

    /**
     * Plans regions for items of the given lengths.
     *
     * @param ownRegionAbove items at least this long get a region of their own
     * @param packLimit      a shared region is closed once it would exceed this many bytes
     * @param alignment      offset alignment of packed items (a power of two)
     * @param pages          the page kind; region sizes are rounded up to whole pages
     */
    public static RegionPlan plan(List<Long> lengths, long ownRegionAbove, long packLimit, long alignment, PageKind pages) {
        return plan(lengths, ownRegionAbove, packLimit, alignment, pages.pageSize());
    }

    /** As above, with region sizes rounded up to a multiple of {@code granule} (e.g. CUDA's 2 MiB). */
    public static RegionPlan plan(List<Long> lengths, long ownRegionAbove, long packLimit, long alignment, long granule) {
        return plan(lengths, ownRegionAbove, packLimit, alignment, granule, 0);
    }

    /**
     * As above, and an item longer than {@code maxRegion} (when it is above 0; a multiple of {@code granule}) lies in a
     * run of regions of {@code maxRegion} bytes, the last one its rest rounded up to the granule.
     */
    public static RegionPlan plan(List<Long> lengths, long ownRegionAbove, long packLimit, long alignment, long granule,
            long maxRegion) {
        if (granule <= 0) {
            throw new IllegalArgumentException("granule must be positive, was " + granule);
        }
        if (maxRegion < 0 || maxRegion > 0 && maxRegion % granule != 0) {
            throw new IllegalArgumentException("maxRegion must be 0 or a multiple of " + granule + ", was " + maxRegion);
        }
        if (Long.bitCount(alignment) != 1) {
            throw new IllegalArgumentException("alignment must be a power of two, was " + alignment);
        }
        List<Long> sizes = new ArrayList<>();
        List<Slot> slots = new ArrayList<>();
        int packing = -1;
        long packed = 0;
        for (long length : lengths) {
            if (length < 0) {
                throw new IllegalArgumentException("negative length " + length);
            }
            if (length == 0) {
                slots.add(new Slot(-1, 0, 0));
            } else if (RegionRuns.isRun(length, maxRegion)) {
                int first = sizes.size();
                for (long k = 0, n = RegionRuns.count(length, maxRegion); k < n; k++) {
                    sizes.add(RegionRuns.size(k, length, maxRegion, granule));
                }
                slots.add(new Slot(first, 0, length, sizes.size() - first));
            } else if (length >= ownRegionAbove) {
                sizes.add(RegionRuns.roundUp(length, granule));
                slots.add(new Slot(sizes.size() - 1, 0, length));
            } else {
                long offset = (packed + alignment - 1) & -alignment;
                if (packing < 0 || offset + length > packLimit) {
                    sizes.add(0L);
                    packing = sizes.size() - 1;
                    offset = 0;
                }
                slots.add(new Slot(packing, offset, length));
                packed = offset + length;
                sizes.set(packing, RegionRuns.roundUp(packed, granule));
            }
        }
        return new RegionPlan(sizes, slots);
    }

    public List<Long> regionSizes() {
        return regionSizes;
    }

    public List<Slot> slots() {
        return slots;
    }

    public long totalBytes() {
        return regionSizes.stream().mapToLong(Long::longValue).sum();
    }
}
