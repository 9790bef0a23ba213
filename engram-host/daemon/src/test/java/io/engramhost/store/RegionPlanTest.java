package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.engramhost.memfd.PageKind;
import java.util.List;
import org.junit.jupiter.api.Test;

class RegionPlanTest {
    private static final long MIB = 1 << 20;

    @Test
    void shouldGiveLargeItemsTheirOwnRegionAndPackSmallOnes() {
        RegionPlan plan = RegionPlan.plan(List.of(100L, 300 * MIB, 0L, 5000L, 10L), 64 * MIB, 1024 * MIB, 4096,
                PageKind.SMALL);
        assertEquals(List.of(4096L + 8192L + 4096L, 300 * MIB), plan.regionSizes());
        assertEquals(new RegionPlan.Slot(0, 0, 100), plan.slots().get(0));
        assertEquals(new RegionPlan.Slot(1, 0, 300 * MIB), plan.slots().get(1));
        assertEquals(new RegionPlan.Slot(-1, 0, 0), plan.slots().get(2));
        assertEquals(new RegionPlan.Slot(0, 4096, 5000), plan.slots().get(3));
        assertEquals(new RegionPlan.Slot(0, 12288, 10), plan.slots().get(4));
    }

    @Test
    void shouldStartANewSharedRegionPastThePackLimit() {
        RegionPlan plan = RegionPlan.plan(List.of(3 * MIB, 3 * MIB, 3 * MIB), 4 * MIB, 8 * MIB, 4096, PageKind.HUGE_2M);
        assertEquals(List.of(6 * MIB, 4 * MIB), plan.regionSizes());
        assertEquals(1, plan.slots().get(2).region());
    }

    @Test
    void shouldPutAnItemLargerThanTheLargestRegionInARunOfRegions() {
        long g = 2 * MIB;
        RegionPlan plan = RegionPlan.plan(List.of(100L, 150 * MIB + 1, 64 * MIB, 80 * MIB), 64 * MIB, 1024 * MIB, 4096, g,
                64 * MIB);
        // 100 B packed (region 0); 150 MiB + 1 in a run of 64 + 64 + 24 MiB (regions 1-3); 64 MiB alone (4); 80 MiB
        // in a run of 64 + 16 (5-6)
        assertEquals(List.of(g, 64 * MIB, 64 * MIB, 24 * MIB, 64 * MIB, 64 * MIB, 16 * MIB), plan.regionSizes());
        assertEquals(new RegionPlan.Slot(1, 0, 150 * MIB + 1, 3), plan.slots().get(1));
        assertEquals(new RegionPlan.Slot(4, 0, 64 * MIB, 1), plan.slots().get(2));
        assertEquals(new RegionPlan.Slot(5, 0, 80 * MIB, 2), plan.slots().get(3));
        assertEquals(1, plan.slots().get(1).regionAt(0, 64 * MIB));
        assertEquals(2, plan.slots().get(1).regionAt(64 * MIB, 64 * MIB));
        assertEquals(3, plan.slots().get(1).regionAt(150 * MIB, 64 * MIB));
        assertEquals(plan.regionSizes(), RegionPlan.plan(List.of(100L, 150 * MIB + 1, 64 * MIB, 80 * MIB), 64 * MIB,
                1024 * MIB, 4096, g, 64 * MIB).regionSizes());
        assertEquals(4, RegionPlan.plan(List.of(100L, 150 * MIB + 1, 64 * MIB, 80 * MIB), 64 * MIB, 1024 * MIB, 4096, g,
                0).regionSizes().size(), "0: one region per item, whatever its size");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RegionPlan.plan(List.of(1L), 10, 10, 4096, g, 3 * MIB));
        assertEquals("maxRegion must be 0 or a multiple of 2097152, was 3145728", e.getMessage());
    }

    @Test
    void shouldRejectBadAlignment() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RegionPlan.plan(List.of(1L), 10, 10, 3, PageKind.SMALL));
        assertEquals("alignment must be a power of two, was 3", e.getMessage());
    }
}
