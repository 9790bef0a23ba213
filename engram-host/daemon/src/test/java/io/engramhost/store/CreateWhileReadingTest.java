package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real load reads each region as soon as it exists, while the next is created (cuda-vmm creates about 4 GiB/s
 * on an H200, whatever the threads: reading must not wait for all of it), in the one phase {@code read}, whose
 * bytes move as the reads go.
 */
class CreateWhileReadingTest {
    @Test
    void shouldReadEachRegionWhileTheNextIsCreated(@TempDir Path dir) throws Exception {
        // two tables of 64 MiB (a region each) and their scales (packed): three regions
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1),
                1 << 20, 64, 7));
        OpenCheckpoint open = OpenCheckpoint.open(ckpt);
        List<TensorInfo> tensors = open.checkpoint().select(List.of());
        Fingerprint fingerprint = Limits.checkServed(open.checkpoint(), List.of(), "memfd");
        List<LoadProgress.Snapshot> seen = new ArrayList<>();
        long[] read0 = {-1};
        LoadProgress progress = new LoadProgress(line -> { });
        HostRegionFactory watched = new WatchedMemfd(index -> {
            seen.add(progress.snapshot());
            if (index == 1) { // bytes of the first region arrive before the second region exists
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (progress.bytesDone() == 0 && System.nanoTime() < deadline) {
                    Thread.onSpinWait();
                }
                read0[0] = progress.bytesDone();
            }
        });
        HostCatalogBuilder builder = new HostCatalogBuilder(new LoadSettings(open, tensors, fingerprint,
                RecordCheck.NONE, watched, "memfd", null, 2, io.engramhost.hooks.DaemonHooks.NONE, null));
        try (Catalog c = builder.build(progress)) {
            assertTrue(seen.size() >= 3, "regions: " + seen.size());
            long total = builder.plannedBytes();
            long before = 0;
            long tensorBytes = tensors.stream().mapToLong(TensorInfo::length).sum();
            for (LoadProgress.Snapshot s : seen) {
                assertEquals(LoadProgress.READ, s.phase());
                assertEquals(tensorBytes, s.total());
                assertTrue(s.done() >= before, "reading moves: " + seen);
                before = s.done();
            }
            assertEquals(0, seen.get(0).done());
            assertTrue(read0[0] > 0, "the first region was being read before the second was made");
            assertTrue(seen.get(0).detail().startsWith("creating " + seen.size() + " memfd regions and loading "),
                    seen.get(0).detail());
            LoadTimings t = progress.loadTimings();
            assertEquals(total, t.createBytes());
            assertEquals(tensorBytes, t.readBytes());
        }
    }
}
