package io.engramhost.vmm;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class AttachTimingsTest {
    @Test
    void shouldSumTheStepsAndReportThemAsOneJsonLine() {
        AttachTimings t = new AttachTimings(1_000_000, 2_000_000, 3_000_000, 0, 1L << 30, 2);
        assertEquals(6_000_000, t.totalNanos());
        assertEquals(6.0, t.millisPerGiB());
        assertEquals("{\"bytes\":1073741824,\"handles\":2,\"import_ms\":1.000,\"reserve_map_ms\":2.000,"
                + "\"gpu_access_ms\":3.000,\"cpu_access_ms\":0.000,\"total_ms\":6.000,\"ms_per_gib\":6.000}", t.toJson());
    }
}
