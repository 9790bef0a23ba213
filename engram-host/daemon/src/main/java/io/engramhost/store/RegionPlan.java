package io.engramhost.store;

import io.engramhost.memfd.PageKind;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Where each of a list of byte ranges goes: which region (memfd) and at which offset. Large items get
 * a region of their own; small ones are packed, at aligned offsets, into shared regions, so the number
 * of fds follows the number of regions rather than the number of tensors. Empty items get no region.
 */
public final class RegionPlan {
    /** An item's place: region index (-1 for an empty item) and byte offset in it. */
    public record Slot(int region, long offset, long length) {
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
        if (granule <= 0) {
            throw new IllegalArgumentException("granule must be positive, was " + granule);
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
            } else if (length >= ownRegionAbove) {
                sizes.add(roundUp(length, granule));
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
                sizes.set(packing, roundUp(packed, granule));
            }
        }
        return new RegionPlan(sizes, slots);
    }

    private static long roundUp(long bytes, long granule) {
        return (Math.max(bytes, 1) + granule - 1) / granule * granule;
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
