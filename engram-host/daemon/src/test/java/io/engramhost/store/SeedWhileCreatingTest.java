package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.ContentIdentity;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TableDigests;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.protocol.Manifest;
import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedSettings;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Seeding fills each region as soon as it exists, while the next is created (issue #29: creation overlapped with the
 * transfer), from a peer on a real loopback socket ({@link FileExporter}); and a creation that fails midway stops the
 * transfer, closes every region made, and leaves no fd behind.
 */
@Timeout(120)
class SeedWhileCreatingTest {
    private static final SeedKey KEY = SeedKey.of(SeedAuth.random(32));

    /**
     * Two tables of 64 MiB (regions 1 and 2) and their scales (packed, region 0): three regions, which a seeded load
     * creates largest first, so in the order 1, 2, 0; with a digest record.
     */
    private record Setup(Path checkpoint, Map<String, TableDigests> record) {
    }

    private static Setup checkpoint(Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1),
                1 << 20, 64, 7));
        try (OpenCheckpoint open = OpenCheckpoint.open(ckpt)) {
            Map<String, TableDigests> record = DigestSidecar.computeRecord(open, open.checkpoint().select(List.of()),
                    2, done -> { });
            DigestSidecar.writeRecord(DigestSidecar.locationFor(ckpt), record);
            return new Setup(ckpt, record);
        }
    }

    private static FileExporter exporter(Setup s) throws Exception {
        List<FileExporter.Table> tables = new ArrayList<>();
        try (OpenCheckpoint open = OpenCheckpoint.open(s.checkpoint())) {
            for (TensorInfo t : open.checkpoint().select(List.of())) {
                tables.add(new FileExporter.Table(t.name(), t.file(), t.offset(), t.length(),
                        Long.parseUnsignedLong(s.record().get(t.name()).engramDigest(), 16)));
            }
        }
        return new FileExporter(KEY, tables);
    }

    private static HostCatalogBuilder builder(Setup s, HostRegionFactory factory, FileExporter peer) throws Exception {
        return builder(s, factory, peer, 0);
    }

    private static HostCatalogBuilder builder(Setup s, HostRegionFactory factory, FileExporter peer, long staging)
            throws Exception {
        OpenCheckpoint open = OpenCheckpoint.open(s.checkpoint());
        List<TensorInfo> tensors = open.checkpoint().select(List.of());
        Fingerprint fingerprint = Limits.checkServed(open.checkpoint(), List.of(), "memfd");
        RecordCheck records = RecordCheck.of(open.checkpoint(), tensors, ContentIdentity.of(open.checkpoint(), tensors));
        assertEquals(tensors.size(), records.tables());
        SeedSettings seed = new SeedSettings(null, List.of(peer.address()), KEY, SeedAuth.random(SeedAuth.ID_BYTES),
                null, staging);
        return new HostCatalogBuilder(new LoadSettings(open, tensors, fingerprint, records, factory, "memfd", null, 2,
                DaemonHooks.NONE, seed));
    }

    /** Waits until {@code peer} has sent a DATA, up to 20 s; whether it had. */
    private static boolean awaitData(FileExporter peer) {
        return awaitData(peer, 1, 20_000);
    }

    /** Waits until {@code peer} has sent {@code n} DATAs, up to {@code millis}; whether it had. */
    private static boolean awaitData(FileExporter peer, int n, long millis) {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        while (peer.datas() < n && System.nanoTime() < deadline) {
            Thread.onSpinWait();
        }
        return peer.datas() >= n;
    }

    /** Every table the catalog serves has the record's sha256-tree-v1, read through its fd. */
    private static void assertRecordsBytes(Setup s, Catalog c) {
        Catalog.Served host = c.servedTo(-1);
        for (Manifest.Table t : host.manifest().tables()) {
            byte[] tree = TreeDigest.digest(host.fds().get(t.region()), t.offset(), t.bytes(), 2);
            assertEquals(s.record().get(t.name()).treeDigest(), TreeDigest.hex(tree), t.name());
        }
    }

    @Test
    void shouldFillTheFirstRegionFromThePeerBeforeTheNextIsCreated(@TempDir Path dir) throws Exception {
        Setup s = checkpoint(dir);
        try (FileExporter peer = exporter(s)) {
            List<Integer> sentBefore = Collections.synchronizedList(new ArrayList<>());
            WatchedMemfd factory = new WatchedMemfd(i -> {
                if (i == 2) { // the second made; with the old order (every region, then the transfer) no byte came first
                    awaitData(peer);
                }
                sentBefore.add(peer.datas());
            });
            LoadProgress progress = new LoadProgress(line -> { });
            HostCatalogBuilder b = builder(s, factory, peer);
            try (Catalog c = b.build(progress)) {
                assertEquals(List.of(1, 2, 0), factory.created, "the largest regions first, the packed scales last");
                assertEquals(0, sentBefore.get(0));
                assertTrue(sentBefore.get(1) > 0, "a range of the first region arrived before the second existed: "
                        + sentBefore);
                LoadReport.Seeded seeded = progress.report().origin().seeded();
                long tableBytes = 0;
                for (Manifest.Table t : c.servedTo(-1).manifest().tables()) {
                    tableBytes += t.bytes();
                }
                assertEquals(tableBytes, seeded.bytes(), "every table from the peer: " + seeded);
                assertEquals(0, progress.loadTimings().readBytes(), "nothing read from the disk");
                Catalog.Served host = c.servedTo(-1);
                for (Manifest.Table t : host.manifest().tables()) { // every table as the record says, through its fd
                    byte[] tree = TreeDigest.digest(host.fds().get(t.region()), t.offset(), t.bytes(), 2);
                    assertEquals(s.record().get(t.name()).treeDigest(), TreeDigest.hex(tree), t.name());
                }
            }
            assertEquals(0, factory.open.get(), "every region closed with the catalog");
        }
    }

    /**
     * Region 0's creation (the last) fails once {@code sent} DATAs have come (with {@code staging} bytes of staging):
     * the load fails with that creation's own error, regions 1 and 2 were made and are closed, every connection to
     * the peer ends, and (on the second pass, once every class the failure needs is loaded) no fd is left behind.
     */
    private static void assertFailedCreationLeavesNothing(Path dir, long staging, int sent) throws Exception {
        Setup s = checkpoint(dir);
        try (FileExporter peer = exporter(s)) {
            for (int pass = 0; pass < 2; pass++) {
                long fdsBefore = openFds();
                IllegalStateException refusal = new IllegalStateException("region 0: out of memory (test)");
                WatchedMemfd factory = new WatchedMemfd(i -> {
                    if (i == 0) {
                        assertTrue(awaitData(peer, sent, 10_000), sent + " ranges came before region 0");
                        throw refusal;
                    }
                });
                HostCatalogBuilder b = builder(s, factory, peer, staging);
                assertSame(refusal, assertThrows(IllegalStateException.class, () -> b.build(new LoadProgress(l -> { }))),
                        "the creation's own error");
                assertEquals(List.of(1, 2), factory.created);
                assertEquals(0, factory.open.get(), "both regions made were closed");
                peer.awaitNoConnections();
                if (pass == 1) {
                    assertEquals(fdsBefore, openFds(), "no fd left behind: " + List.of(fdList()));
                }
            }
        }
    }

    @Test
    void shouldStopTheTransferAndCloseEveryRegionWhenACreationFails(@TempDir Path dir) throws Exception {
        assertFailedCreationLeavesNothing(dir, 0, 1);
    }

    @Test
    void shouldStageTheRangesOfRegionsNotYetMadeAndServeTheRecordsBytes(@TempDir Path dir) throws Exception {
        Setup s = checkpoint(dir);
        try (FileExporter peer = exporter(s)) {
            List<Integer> sentBefore = Collections.synchronizedList(new ArrayList<>());
            // created in the order 1, 2, 0. Region 1 is made only once a range has come, and region 2 once all 4
            // have: each could come only into a staging buffer (region 1 is staged as the first made: nothing else
            // could be asked for meanwhile; the others as no larger region follows them). Without staging the
            // first wait would end after 10 s with nothing sent. Four ranges at once, a 64 MiB buffer each.
            WatchedMemfd factory = new WatchedMemfd(i -> {
                if (i == 1) {
                    awaitData(peer, 1, 10_000);
                } else if (i == 2) {
                    awaitData(peer, 4, 10_000);
                }
                sentBefore.add(peer.datas());
            });
            LoadProgress progress = new LoadProgress(line -> { });
            try (Catalog c = builder(s, factory, peer, 256L << 20).build(progress)) {
                assertEquals(List.of(1, 2, 0), factory.created, "the largest regions first");
                assertTrue(sentBefore.get(0) >= 1, "the first region's range staged before it existed: " + sentBefore);
                assertEquals(4, sentBefore.get(1), "region 2's and region 0's ranges staged before they existed: "
                        + sentBefore);
                LoadReport.Seeded seeded = progress.report().origin().seeded();
                long tableBytes = 0;
                for (Manifest.Table t : c.servedTo(-1).manifest().tables()) {
                    tableBytes += t.bytes();
                }
                assertEquals(tableBytes, seeded.bytes(), "every table from the peer: " + seeded);
                assertEquals(tableBytes, seeded.stagedBytes(), "every range went through staging: " + seeded);
                assertEquals(0, progress.loadTimings().readBytes(), "nothing read from the disk");
                assertRecordsBytes(s, c);
            }
            assertEquals(0, factory.open.get(), "every region closed with the catalog");
        }
    }

    @Test
    void shouldDropWhatIsStagedAndCloseEveryRegionWhenACreationFails(@TempDir Path dir) throws Exception {
        assertFailedCreationLeavesNothing(dir, 256L << 20, 4); // the scales' ranges staged, then dropped
    }

    private static String[] fdList() {
        String[] fds = Path.of("/proc/self/fd").toFile().list();
        if (fds == null) {
            throw new AssertionError("cannot list /proc/self/fd");
        }
        return fds;
    }

    private static long openFds() {
        return fdList().length;
    }
}
