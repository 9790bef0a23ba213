package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.Map;
import org.junit.jupiter.api.Test;

class PlacementReportTest {
    @Test
    void shouldShowShareOfEachNode() {
        PlacementReport r = new PlacementReport(4096, 3000, Map.of(1, 1000L, 0, 1999L), 1, Map.of());
        assertEquals("node0=1999 pages (66.6%), node1=1000 pages (33.3%), not present=1 pages (<0.1%)", r.toString());
        assertEquals(1000 / 3000.0, r.fractionOn(1));
        assertEquals(0.0, r.fractionOn(2));
        assertFalse(r.allOn(0));
    }

    @Test
    void shouldNeverRoundAPartialShareToAll() {
        PlacementReport r = new PlacementReport(4096, 10_000, Map.of(0, 9_999L), 0, Map.of(14, 1L));
        assertEquals("node0=9999 pages (>99.9%), EFAULT=1 pages (<0.1%)", r.toString());
        assertEquals("no pages", new PlacementReport(4096, 0, Map.of(), 0, Map.of()).toString());
    }
}
