package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** STATUS's {@code load} object keeps its fields (docs/protocol.md: seconds and GiB/s per phase). */
class LoadTimingsTest {
    @Test
    void shouldReportSecondsPerPhaseAndTheReadRate() {
        LoadTimings t = new LoadTimings(250_000_000, 2_000_000_000, 4L << 30, 500_000_000, 125_000_000);
        Map<String, Object> m = t.toMap();
        assertEquals(List.of("create_s", "read_s", "read_gib_s", "digest_s", "verify_seal_s"), List.copyOf(m.keySet()));
        assertEquals(0.25, m.get("create_s"));
        assertEquals(2.0, m.get("read_s"));
        assertEquals(2.0, m.get("read_gib_s"));
        assertEquals(0.5, m.get("digest_s"));
        assertEquals(0.125, m.get("verify_seal_s"));
    }

    @Test
    void shouldComputeTheRateAsTheLoadAlwaysDid() {
        long total = 3_000_000_007L;
        long t1 = 1_000;
        long t2 = 1_234_567_891L;
        double before = t2 > t1 ? total / ((t2 - t1) / 1e9) / (1L << 30) : 0.0;
        assertEquals(before, new LoadTimings(0, t2 - t1, total, 0, 0).toMap().get("read_gib_s"));
    }

    @Test
    void shouldReportNoRateForAReadOfNoTime() {
        assertEquals(0.0, new LoadTimings(0, 0, 1L << 30, 0, 0).readGibPerSecond());
    }

    @Test
    void shouldBeStatusLoadFactOnceRecorded() {
        LoadProgress progress = new LoadProgress(line -> { });
        assertNull(progress.loadTimings());
        LoadTimings t = new LoadTimings(1, 2, 3, 4, 5);
        progress.put("placement", Map.of("node0_pages", 1));
        progress.loadTimings(t);
        assertSame(t, progress.loadTimings());
        assertEquals(List.of("placement", "load"), List.copyOf(progress.facts().keySet()));
        assertEquals(t.toMap(), progress.facts().get("load"));
    }
}
