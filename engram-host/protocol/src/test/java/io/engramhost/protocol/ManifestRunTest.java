package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A cuda-vmm host table over a run of consecutive regions (docs/protocol.md), decoded and refused as the doc says. */
class ManifestRunTest {
    private static final long MIB = 1 << 20;

    private static Manifest.Region vmm(long size, int node) {
        return new Manifest.Region(RegionKind.VMM_HOST, size, node, -1);
    }

    private static Manifest.Table table(String name, long bytes, int region, long offset, RegionKind kind) {
        return new Manifest.Table(name, "U8", new long[] {bytes}, bytes, region, offset, 1, kind, 0, -1);
    }

    private static Manifest decode(List<Manifest.Region> regions, Manifest.Table... tables) {
        Manifest m = new Manifest(new byte[32], new byte[0], regions, List.of(tables));
        return Manifest.decode(FrameReader.of(m.encode(2)));
    }

    @Test
    void shouldAcceptATableOverARunAndCountItsRegions() {
        Manifest m = decode(List.of(vmm(2 * MIB, 0), vmm(2 * MIB, 0), vmm(2 * MIB, 0), vmm(2 * MIB, 0)),
                table("a", 3 * MIB, 0, 0, RegionKind.VMM_HOST), table("b", 3 * MIB, 1, MIB, RegionKind.VMM_HOST),
                table("c", 2 * MIB, 3, 0, RegionKind.VMM_HOST));
        assertEquals(2, m.runLength(m.tables().get(0)));
        assertEquals(2, m.runLength(m.tables().get(1)), "from the middle of region 1 to the end of region 2");
        assertEquals(1, m.runLength(m.tables().get(2)));
        Manifest one = decode(List.of(vmm(2 * MIB, 0), vmm(2 * MIB, 0), vmm(2 * MIB, 0)),
                table("d", 5 * MIB, 0, MIB, RegionKind.VMM_HOST));
        assertEquals(3, one.runLength(one.tables().get(0)));
    }

    @Test
    void shouldRefuseARunThatEndsPastTheLastRegionOrMeetsAnotherKindOrNode() {
        ProtocolException past = assertThrows(ProtocolException.class, () -> decode(
                List.of(vmm(2 * MIB, 0), vmm(2 * MIB, 0)), table("t", 4 * MIB + 1, 0, 0, RegionKind.VMM_HOST)));
        assertEquals("MANIFEST: table t [0, +4194305) runs past the last region: the run from region 0 lacks 1 bytes",
                past.getMessage());
        ProtocolException node = assertThrows(ProtocolException.class, () -> decode(
                List.of(vmm(2 * MIB, 0), vmm(2 * MIB, 1)), table("t", 3 * MIB, 0, 0, RegionKind.VMM_HOST)));
        assertEquals("MANIFEST: table t says kind 2, node 0, device -1 but region 1 of its run has 2, 1, -1",
                node.getMessage());
        ProtocolException memfd = assertThrows(ProtocolException.class, () -> decode(
                List.of(new Manifest.Region(RegionKind.MEMFD, 4096, 0, -1), new Manifest.Region(RegionKind.MEMFD, 4096,
                        0, -1)), table("t", 8192, 0, 0, RegionKind.MEMFD)));
        assertEquals("MANIFEST: table t [0, +8192) lies outside its region of 4096 bytes", memfd.getMessage());
        ProtocolException atEnd = assertThrows(ProtocolException.class, () -> decode(
                List.of(vmm(2 * MIB, 0), vmm(2 * MIB, 0)), table("t", MIB, 0, 2 * MIB, RegionKind.VMM_HOST)));
        assertEquals("MANIFEST: table t [2097152, +1048576) lies outside its region of 2097152 bytes",
                atEnd.getMessage(), "a table starts inside its first region");
    }

    /**
     * A lying daemon's worst: 65,536 regions and 200,000 tables, each over all of them. Walking each run would take
     * 13 billion steps; the check finds each run's end by bisection.
     */
    @Test
    @Timeout(value = 20, unit = TimeUnit.SECONDS)
    void shouldCheckManyTablesOverLongRunsWithoutWalkingThem() {
        List<Manifest.Region> regions = new ArrayList<>();
        for (int i = 0; i < 65536; i++) {
            regions.add(vmm(2 * MIB, 0));
        }
        long all = 65536 * 2 * MIB;
        List<Manifest.Table> tables = new ArrayList<>();
        for (int i = 0; i < 200_000; i++) {
            tables.add(table("t" + i, all - 1, 0, 1, RegionKind.VMM_HOST));
        }
        Manifest m = decode(regions, tables.toArray(Manifest.Table[]::new));
        assertEquals(200_000, m.tables().size());
    }
}
