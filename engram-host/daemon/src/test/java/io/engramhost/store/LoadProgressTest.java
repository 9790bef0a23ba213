package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The load's phases: a phase counts its bytes, is logged before it starts, and STATUS reads one snapshot. */
class LoadProgressTest {
    @Test
    void shouldCountBytesPerPhaseAndLogEachPhaseBeforeItStarts() {
        List<String> lines = new ArrayList<>();
        List<String> phaseWhenLogged = new ArrayList<>();
        LoadProgress[] holder = new LoadProgress[1];
        LoadProgress p = new LoadProgress(line -> {
            lines.add(line);
            phaseWhenLogged.add(holder[0].phase() + " " + holder[0].bytesDone());
        });
        holder[0] = p;
        assertEquals(LoadProgress.STARTING, p.phase());
        p.phase(LoadProgress.DEVICE, "loading 3 device tensors", 3L << 30);
        assertEquals(LoadProgress.DEVICE, p.phase());
        assertEquals("loading 3 device tensors", p.detail());
        assertEquals(0, p.bytesDone());
        for (int i = 1; i <= 3; i++) {
            p.advance(1L << 30);
            LoadProgress.Snapshot s = p.snapshot();
            assertEquals(LoadProgress.DEVICE, s.phase());
            assertEquals((long) i << 30, s.done(), "the phase moves as bytes are done");
            assertEquals(3L << 30, s.total());
        }
        assertTrue(p.text().startsWith("loading 3 device tensors 100% (3.0 GiB of 3.0 GiB, "), p.text());
        p.phase(LoadProgress.READ, "loading 2 tensors with 4 threads", 2L << 30);
        assertEquals(List.of("loading 3 device tensors (3.0 GiB)", "loading 2 tensors with 4 threads (2.0 GiB)"), lines);
        assertEquals("device " + (3L << 30), phaseWhenLogged.get(1), "logged while the ended phase still shows its count");
        assertEquals(0, p.bytesDone(), "a new phase starts at 0");
        p.done(1L << 30);
        p.done(1L << 29); // out of order: done only grows
        assertEquals(1L << 30, p.bytesDone());
        p.finish(2L << 30);
        assertEquals(LoadProgress.LOADED, p.phase());
        assertEquals(p.bytesTotal(), p.bytesDone());
    }
}
