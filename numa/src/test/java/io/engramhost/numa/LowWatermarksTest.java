package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LowWatermarksTest {
    @Test
    void shouldSumTheLowPagesOfEachNodesZones() {
        Path file = Fixtures.root(Fixtures.TWO_SOCKET).resolve("proc/zoneinfo");
        LowWatermarks w = LowWatermarks.read(file, 4096);
        // node 0: DMA 4 + DMA32 1204 + Normal 290000 + Movable 0; node 1: Normal 292000 (min, high and the per-CPU
        // "high:" lines are not counted)
        assertEquals(Map.of(0, 291208L * 4096, 1, 292000L * 4096), w.bytes());
        assertEquals(Optional.empty(), w.unknown());
        assertEquals(583208L * 4096, w.total());
        assertEquals(292000L * 4096, w.sum(java.util.List.of(1, 7)));
        assertEquals(291208L * 65536, LowWatermarks.read(file, 65536).bytes().get(0), "pages of the given size");
    }

    @Test
    void shouldSayWhyWhenZoneinfoCannotBeUsedAndNeverThrow(@TempDir Path dir) throws IOException {
        Path missing = dir.resolve("zoneinfo");
        assertEquals(new LowWatermarks(Map.of(), Optional.of(missing + " is missing")), LowWatermarks.read(missing, 4096));
        Files.createDirectory(missing);
        LowWatermarks unreadable = LowWatermarks.read(missing, 4096);
        assertEquals(Map.of(), unreadable.bytes());
        assertEquals(true, unreadable.unknown().orElseThrow().startsWith(missing + ": cannot read: "),
                unreadable.unknown()::toString);
        assertEquals(0, unreadable.total());
        Path empty = Files.writeString(dir.resolve("empty"), "");
        assertEquals(Optional.of(empty + " lists no zones"), LowWatermarks.read(empty, 4096).unknown());
        Path bad = Files.writeString(dir.resolve("bad"), "Node 0, zone   Normal\n  pages free     12\n        low      x\n");
        assertEquals(Optional.of(bad + ": 'x' is not a number"), LowWatermarks.read(bad, 4096).unknown());
    }
}
