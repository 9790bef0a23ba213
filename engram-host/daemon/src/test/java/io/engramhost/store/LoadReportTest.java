package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The load report travels with the tables to a successor (a takeover, the fd store) as JSON: every field comes back
 * as it went, a report written by the build before this one (the same keys, as a map) reads the same, and a field
 * of the wrong type is refused with one line naming it instead of becoming empty.
 */
class LoadReportTest {
    private static final LoadReport FULL = LoadReport.EMPTY
            .withMemory("16.3 MiB fits on this machine", 1L << 34)
            .withLoadThreads(new LoadReport.LoadThreads(16, 0, "0-15", null))
            .withLoad(new LoadTimings(250_000_000, 1L << 30, 2_000_000_000, 4L << 30, 1L << 30, 125_000_000).toReport())
            .withPlacement(new LoadReport.Placement(Map.of(0, 12892L, 1, 3L), null))
            .withDeviceTensors(new LoadReport.DeviceTensorsFact(2, 4096, List.of(0, 1)))
            .withReady(1.5, 2.25, 3.0)
            .withOrigin(new LoadReport.Origin(LoadReport.How.TAKEOVER, 4242, 0, 38.5, null));

    @Test
    void comesBackAsItWent() {
        assertEquals(FULL, LoadReport.parse(FULL.encode()));
        assertEquals(LoadReport.EMPTY, LoadReport.parse(LoadReport.EMPTY.encode()));
    }

    @Test
    void carriesWhatPeersGave() {
        LoadReport.Seeded seeded = new LoadReport.Seeded(List.of(new LoadReport.SeedSource("10.0.0.5:7070", 1L << 30,
                0.5)), 1L << 30, 0.75, 1);
        LoadReport r = LoadReport.EMPTY.withOrigin(LoadReport.Origin.seeded((1L << 30) + 4096, seeded));
        assertEquals(r, LoadReport.parse(r.encode()));
        assertEquals(LoadReport.How.SEED, r.origin().how());
        assertEquals(4096, r.origin().checkpointBytesRead());
    }

    @Test
    void readsWhatThePreviousBuildWrote() {
        // STATUS's facts as 7b6b5ba's Daemon put them into HANDOVER_CATALOG (LoadProgress.facts(), JSON), key order
        // and all; a newer build's extra key is ignored.
        String old = "{\"memory_check\":\"4.1 MiB fits\",\"load_threads\":{\"threads\":2,\"cpus\":\"any\"},"
                + "\"load\":{\"create_s\":0.00344729,\"create_gib_s\":1.1,\"read_s\":0.02,\"read_gib_s\":0.5,"
                + "\"read_direct_bytes\":0,\"verify_seal_s\":0.01},\"placement\":{\"node0_pages\":12892},"
                + "\"ready_s\":0.5,\"process_ready_s\":1.25,\"ready_gib_s\":0.01,"
                + "\"origin\":{\"how\":\"load\",\"checkpoint_bytes_read\":4096},\"a_later_field\":[1,2]}";
        LoadReport r = LoadReport.parse(old);
        assertEquals("4.1 MiB fits", r.memoryCheck());
        assertNull(r.memoryBudget());
        assertEquals(new LoadReport.LoadThreads(2, null, "any", null), r.loadThreads());
        assertEquals(0.00344729, r.load().createSeconds());
        assertEquals(Map.of(0, 12892L), r.placement().pagesByNode());
        assertEquals(LoadReport.Origin.load(4096), r.origin());
        assertEquals(1.25, r.processReadySeconds());
    }

    @Test
    void refusesAFieldOfTheWrongTypeNamingIt() {
        assertEquals("load report: origin.how is 'teleport', not one of load, takeover, takeover-orphaned, fd-store, seed",
                assertThrows(IllegalArgumentException.class, () -> LoadReport.parse(
                        "{\"origin\":{\"how\":\"teleport\",\"checkpoint_bytes_read\":0}}")).getMessage());
        assertEquals("load report.load.read_s is not a number", assertThrows(IllegalArgumentException.class,
                () -> LoadReport.parse("{\"load\":{\"create_s\":1,\"create_gib_s\":1,\"read_s\":\"fast\"}}"))
                .getMessage());
        assertEquals("load report.placement.node0_pages is not an integer", assertThrows(IllegalArgumentException.class,
                () -> LoadReport.parse("{\"placement\":{\"node0_pages\":1.5}}")).getMessage());
        assertEquals("load report is not a JSON object", assertThrows(IllegalArgumentException.class,
                () -> LoadReport.parse("[]")).getMessage());
        assertEquals("load report: not JSON", assertThrows(IllegalArgumentException.class,
                () -> LoadReport.parse("{")).getMessage().replaceFirst(": not JSON: .*", ": not JSON"));
    }
}
