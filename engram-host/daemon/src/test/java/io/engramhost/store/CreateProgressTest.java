package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.protocol.RegionKind;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real load's region creation is its own phase, {@code create}, and its bytes move region by region
 * (cuda-vmm takes seconds per tens of GiB; before, STATUS stayed at 0% meanwhile).
 */
class CreateProgressTest {
    @Test
    void shouldAdvanceCreationRegionByRegion(@TempDir Path dir) throws Exception {
        // two tables of 64 MiB (a region each) and their scales (packed): three regions
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1),
                1 << 20, 64, 7));
        OpenCheckpoint open = OpenCheckpoint.open(ckpt);
        List<TensorInfo> tensors = open.checkpoint().select(List.of());
        Fingerprint fingerprint = Limits.checkServed(open.checkpoint(), List.of(), "memfd");
        HostRegionFactory memfd = HostRegionFactory.memfd(PageKind.SMALL, NumaPolicy.none());
        List<LoadProgress.Snapshot> seen = new ArrayList<>();
        LoadProgress progress = new LoadProgress(line -> { });
        HostRegionFactory watched = new HostRegionFactory() {
            @Override
            public RegionKind kind() {
                return memfd.kind();
            }

            @Override
            public long granule() {
                return memfd.granule();
            }

            @Override
            public int node() {
                return memfd.node();
            }

            @Override
            public HostRegion create(int index, long size) {
                seen.add(progress.snapshot());
                return memfd.create(index, size);
            }
        };
        HostCatalogBuilder builder = new HostCatalogBuilder(open, tensors, fingerprint, watched, "memfd", null, 2);
        try (Catalog c = builder.build(progress)) {
            assertTrue(seen.size() >= 3, "regions: " + seen.size());
            long total = builder.plannedBytes();
            long before = -1;
            for (LoadProgress.Snapshot s : seen) {
                assertEquals(LoadProgress.CREATE, s.phase());
                assertEquals(total, s.total());
                assertTrue(s.done() > before, "creation moves: " + seen);
                before = s.done();
            }
            assertEquals(0, seen.get(0).done());
            assertTrue(seen.get(seen.size() - 1).done() < total);
            assertTrue(seen.get(0).detail().startsWith("creating " + seen.size() + " memfd regions"), seen.get(0).detail());
            LoadTimings t = progress.loadTimings();
            assertTrue(t != null);
        }
    }
}
