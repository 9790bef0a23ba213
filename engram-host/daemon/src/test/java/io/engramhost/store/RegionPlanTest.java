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
    void shouldRejectBadAlignment() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RegionPlan.plan(List.of(1L), 10, 10, 3, PageKind.SMALL));
        assertEquals("alignment must be a power of two, was 3", e.getMessage());
    }
}
