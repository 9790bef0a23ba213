package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.ContentIdentity;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TableDigests;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import io.engramhost.protocol.Manifest;
import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedSettings;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntConsumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A table larger than the factory's largest region lies in a run of regions, back to back in one address range, and
 * is filled region by region as each is created, from the disk and from a peer (serve --region-max, for cuda-vmm,
 * whose cuMemCreate commits memory at a few GiB/s). cuda-vmm needs a GPU; here the run's regions are memfds mapped
 * into a reserved range by a factory of this test, which the builder drives through the same calls.
 */
@Timeout(120)
class RegionRunsTest {
    private static final long MIB = 1L << 20;
    private static final long MAX = 64 * MIB;
    private static final SeedKey KEY = SeedKey.of(SeedAuth.random(32));

    /** memfd regions; those of a run are also mapped, shared, at their place in the run's reserved range. */
    private static final class MemfdRuns extends WatchedMemfd {
        final AtomicInteger runs = new AtomicInteger();

        MemfdRuns(IntConsumer beforeCreate) {
            super(beforeCreate);
        }

        @Override
        public int node() {
            return -1;
        }

        @Override
        public long maxRegion() {
            return MAX;
        }

        @Override
        public Run reserveRun(long bytes, String name) {
            // the range is the run's: its regions' views are mapped over it and it unmaps them all when closed
            Mapping range = Posix.mmapAt(0, bytes, Posix.PROT_NONE, Posix.MAP_PRIVATE | Posix.MAP_ANONYMOUS
                    | Posix.MAP_NORESERVE, null, 0);
            runs.incrementAndGet();
            return new Run() {
                @Override
                public long address() {
                    return range.address();
                }

                @Override
                public void close() {
                    range.close();
                    runs.decrementAndGet();
                }
            };
        }

        @Override
        public HostRegion createInRun(int index, long size, Run run, long offset) {
            HostRegion r = made(index, size);
            long at = run.address() + offset;
            Posix.mmapAt(at, size, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED | Posix.MAP_FIXED, r.fd(), 0);
            // a writable shared view keeps F_SEAL_WRITE off: at the seal the place goes back to the reserved range
            return counted(r, at, () -> Posix.mmapAt(at, size, Posix.PROT_NONE, Posix.MAP_PRIVATE
                    | Posix.MAP_ANONYMOUS | Posix.MAP_NORESERVE | Posix.MAP_FIXED, null, 0));
        }
    }

    /**
     * Two tables of 192 MiB (a run of three 64 MiB regions each: regions 1-3 and 4-6) and their scales (packed in
     * region 0), with a digest record.
     */
    private static Path checkpoint(Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1),
                3L << 20, 64, 11));
        try (OpenCheckpoint open = OpenCheckpoint.open(ckpt)) {
            Map<String, TableDigests> record = DigestSidecar.computeRecord(open, open.checkpoint().select(List.of()),
                    2, done -> { });
            DigestSidecar.writeRecord(DigestSidecar.locationFor(ckpt), record);
        }
        return ckpt;
    }

    private static HostCatalogBuilder builder(Path ckpt, HostRegionFactory factory, SeedSettings seed) throws Exception {
        OpenCheckpoint open = OpenCheckpoint.open(ckpt);
        List<TensorInfo> tensors = open.checkpoint().select(List.of());
        Fingerprint fingerprint = Limits.checkServed(open.checkpoint(), List.of(), "memfd");
        RecordCheck records = RecordCheck.of(open.checkpoint(), tensors, ContentIdentity.of(open.checkpoint(), tensors));
        return new HostCatalogBuilder(new LoadSettings(open, tensors, fingerprint, records, factory, "memfd", null, 2,
                DaemonHooks.NONE, seed));
    }

    /** Every table's place (the large ones over runs of 64 MiB regions) and bytes, read through the regions' fds. */
    private static void assertServesTheCheckpoint(Path ckpt, Catalog c) throws Exception {
        Catalog.Served host = c.servedTo(-1);
        Manifest m = host.manifest();
        int runs = 0;
        try (OpenCheckpoint open = OpenCheckpoint.open(ckpt);
                FileChannel file = FileChannel.open(open.checkpoint().select(List.of()).get(0).file())) {
            for (TensorInfo t : open.checkpoint().select(List.of())) {
                Manifest.Table mt = m.tables().stream().filter(x -> x.name().equals(t.name())).findFirst().orElseThrow();
                int n = m.runLength(mt);
                assertEquals(Math.max(1, (t.length() + MAX - 1) / MAX), n, t.name() + " lies in " + n + " regions");
                runs += n > 1 ? 1 : 0;
                long done = 0;
                for (int k = 0; k < n; k++) { // each region of the run holds the next bytes of the table
                    Manifest.Region r = m.regions().get(mt.region() + k);
                    long from = k == 0 ? mt.offset() : 0;
                    long len = Math.min(r.size() - from, t.length() - done);
                    assertTrue(n == 1 || r.size() == (k < n - 1 ? MAX : len), "region " + k + " of the run: " + r);
                    try (Mapping view = Posix.mmap(r.size(), Posix.PROT_READ, Posix.MAP_SHARED,
                            host.fds().get(mt.region() + k), 0)) {
                        ByteBuffer want = ByteBuffer.allocate((int) len);
                        file.read(want, t.offset() + done);
                        want.flip();
                        assertEquals(-1, want.mismatch(RawMemory.buffer(view.address() + from, (int) len)),
                                t.name() + ": region " + k + " of its run");
                    }
                    done += len;
                }
                assertEquals(t.length(), done);
            }
        }
        assertEquals(2, runs, "both large tables over runs");
    }

    private static long openFds() {
        String[] fds = Path.of("/proc/self/fd").toFile().list();
        return fds == null ? -1 : fds.length;
    }

    @Test
    void shouldReadEachRegionOfARunAsItIsCreatedAndServeTheCheckpoint(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        LoadProgress progress = new LoadProgress(line -> { });
        long[] readBeforeSecond = {-1};
        long packed;
        try (OpenCheckpoint open = OpenCheckpoint.open(ckpt)) {
            packed = open.checkpoint().select(List.of()).stream().mapToLong(TensorInfo::length).filter(n -> n < MAX)
                    .sum();
        }
        MemfdRuns factory = new MemfdRuns(i -> {
            if (i == 2) { // the first run's second region: bytes of the run's first one are read before it exists
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (progress.bytesDone() <= packed && System.nanoTime() < deadline) {
                    Thread.onSpinWait();
                }
                readBeforeSecond[0] = progress.bytesDone();
            }
        });
        long fds = openFds();
        HostCatalogBuilder b = builder(ckpt, factory, null);
        try (Catalog c = b.build(progress)) {
            assertTrue(readBeforeSecond[0] > packed, "bytes of the run's first region read before its second existed: "
                    + readBeforeSecond[0] + " bytes, " + packed + " of them region 0's");
            assertEquals(List.of(0, 1, 2, 3, 4, 5, 6), factory.created, "a disk load makes them in the plan's order");
            assertEquals(7, c.servedTo(-1).manifest().regions().size(), "3 + 3 regions of the runs, 1 packed");
            assertServesTheCheckpoint(ckpt, c);
        }
        assertEquals(0, factory.open.get(), "every region closed with the catalog");
        assertEquals(0, factory.runs.get(), "every run's range freed");
        assertEquals(fds, openFds(), "no fd left behind");
    }

    /**
     * A table of 4 TiB and a byte (a sparse file: a header can claim it at no cost) at 64 MiB a region would need
     * 65,537 regions: refused in one line before the plan lists them, not after filling the heap with them.
     */
    @Test
    void shouldRefuseATableThatWouldNeedMoreRegionsThanAManifestCarries(@TempDir Path dir) throws Exception {
        long bytes = 65536 * MAX + 1;
        byte[] header = ("{\"t\":{\"dtype\":\"U8\",\"shape\":[" + bytes + "],\"data_offsets\":[0," + bytes + "]}}")
                .getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        Path file = dir.resolve("huge.safetensors");
        try (FileChannel f = FileChannel.open(file, java.nio.file.StandardOpenOption.CREATE_NEW,
                java.nio.file.StandardOpenOption.WRITE)) {
            f.write(ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(0, header.length));
            f.write(ByteBuffer.wrap(header));
            f.truncate(8 + header.length + bytes); // grows it, sparse
            f.position(8 + header.length + bytes - 1).write(ByteBuffer.wrap(new byte[1]));
        }
        OpenCheckpoint open = OpenCheckpoint.open(file);
        List<TensorInfo> tensors = open.checkpoint().select(List.of());
        Fingerprint fingerprint = Limits.checkServed(open.checkpoint(), List.of(), "cuda-vmm");
        io.engramhost.checkpoint.CheckpointException e = org.junit.jupiter.api.Assertions.assertThrows(
                io.engramhost.checkpoint.CheckpointException.class, () -> new LoadSettings(open, tensors,
                        fingerprint, RecordCheck.NONE, new MemfdRuns(i -> { }), "cuda-vmm", null, 2, DaemonHooks.NONE,
                        null));
        open.close();
        assertEquals("the tables need 65537 regions (fds), over the limit of 65536 in one manifest: serve fewer tables"
                + " (--tables), or with --backend cuda-vmm a larger --region-max (docs/checkpoints.md, Limits)",
                e.getMessage());
    }

    @Test
    void shouldSeedEachRegionOfARunAsItIsCreatedAndServeTheRecordsBytes(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        List<FileExporter.Table> tables = new ArrayList<>();
        try (OpenCheckpoint open = OpenCheckpoint.open(ckpt)) {
            Map<String, TableDigests> record = DigestSidecar.readRecord(DigestSidecar.locationFor(ckpt)).both();
            for (TensorInfo t : open.checkpoint().select(List.of())) {
                tables.add(new FileExporter.Table(t.name(), t.file(), t.offset(), t.length(),
                        Long.parseUnsignedLong(record.get(t.name()).engramDigest(), 16)));
            }
        }
        try (FileExporter peer = new FileExporter(KEY, tables)) {
            int[] sentBeforeSecond = {-1};
            MemfdRuns factory = new MemfdRuns(i -> {
                if (i == 2) { // the first run's second region: a range of its first region came before it existed
                    long deadline = System.nanoTime() + 20_000_000_000L;
                    while (peer.datas() == 0 && System.nanoTime() < deadline) {
                        Thread.onSpinWait();
                    }
                    sentBeforeSecond[0] = peer.datas();
                }
            });
            SeedSettings seed = new SeedSettings(null, List.of(peer.address()), KEY,
                    SeedAuth.random(SeedAuth.ID_BYTES), null, 0);
            LoadProgress progress = new LoadProgress(line -> { });
            try (Catalog c = builder(ckpt, factory, seed).build(progress)) {
                assertTrue(sentBeforeSecond[0] > 0, "a range arrived before the run's second region existed");
                assertEquals(List.of(1, 2, 3, 4, 5, 6, 0), factory.created, "each run whole, the runs first");
                LoadReport.Seeded seeded = progress.report().origin().seeded();
                long tableBytes = c.servedTo(-1).manifest().tables().stream().mapToLong(Manifest.Table::bytes).sum();
                assertEquals(tableBytes, seeded.bytes(), "every table from the peer: " + seeded);
                assertEquals(0, progress.loadTimings().readBytes(), "nothing read from the disk");
                assertServesTheCheckpoint(ckpt, c);
            }
            assertEquals(0, factory.open.get(), "every region closed with the catalog");
            assertEquals(0, factory.runs.get(), "every run's range freed");
        }
    }
}
