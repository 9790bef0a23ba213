package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** STATUS's {@code load} object keeps its fields (docs/protocol.md: seconds and GiB/s per phase). */
class LoadTimingsTest {
    @Test
    @SuppressWarnings("unchecked")
    void shouldReportSecondsAndRatePerPhase() {
        LoadTimings t = new LoadTimings(250_000_000, 1L << 30, 2_000_000_000, 4L << 30, 1L << 30, 125_000_000);
        Map<String, Object> m = LoadReport.EMPTY.withLoad(t.toReport()).toJson().get("load") instanceof Map<?, ?> l
                ? new java.util.LinkedHashMap<>((Map<String, Object>) l) : Map.of();
        assertEquals(List.of("create_s", "create_gib_s", "read_s", "read_gib_s", "read_direct_bytes", "verify_seal_s"),
                List.copyOf(m.keySet()));
        assertEquals(0.25, m.get("create_s"));
        assertEquals(4.0, m.get("create_gib_s"));
        assertEquals(2.0, m.get("read_s"));
        assertEquals(2.0, m.get("read_gib_s"));
        assertEquals(1L << 30, m.get("read_direct_bytes"));
        assertEquals(0.125, m.get("verify_seal_s"));
    }

    @Test
    void shouldSayEachPhaseInOneLine() {
        String line = new LoadTimings(250_000_000, 1L << 30, 2_000_000_000, 4L << 30, 1L << 30, 125_000_000).describe();
        assertTrue(line.contains("created in 0.25 s (1.0 GiB, 4.00 GiB/s)"), line);
        assertTrue(line.contains("read and digested in 2.00 s (4.0 GiB, 2.00 GiB/s, 1.0 GiB of it with O_DIRECT)"), line);
        assertTrue(line.contains("sealed in 0.13 s"), line);
    }

    @Test
    void shouldReportNoRateForAPhaseOfNoTime() {
        LoadTimings t = new LoadTimings(0, 1L << 30, 0, 1L << 30, 0, 0);
        assertEquals(0.0, t.readGibPerSecond());
        assertEquals(0.0, t.createGibPerSecond());
    }

    @Test
    void shouldBeStatusLoadFactOnceRecorded() {
        LoadProgress progress = new LoadProgress(line -> { });
        assertNull(progress.loadTimings());
        LoadTimings t = new LoadTimings(1, 2, 3, 4, 5, 6);
        progress.report(r -> r.withPlacement(new LoadReport.Placement(Map.of(0, 1L), null)));
        progress.loadTimings(t);
        assertSame(t, progress.loadTimings());
        assertEquals(List.of("load", "placement"), List.copyOf(progress.report().toJson().keySet()));
        assertEquals(t.toReport(), progress.report().load());
    }
}
