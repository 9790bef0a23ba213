package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TableDigests;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedSettings;
import io.engramhost.seed.Seeder;
import io.engramhost.util.Closer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The requester's staging ({@code --seed-staging}) on its own, against a peer on a real loopback socket
 * ({@link FileExporter}): the test plays the region creator, making each table's memory (an anonymous mapping) when
 * it chooses, and watches what the peer has sent meanwhile.
 */
@Timeout(120)
class SeederStagingTest {
    private static final SeedKey KEY = SeedKey.of(SeedAuth.random(32));

    private record Setup(Path checkpoint, List<TensorInfo> tensors, Map<String, TableDigests> record) {
    }

    /** Two weights of 64 MiB and their scales of 2 MiB, with a digest record. */
    private static Setup checkpoint(Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1),
                1 << 20, 64, 11));
        try (OpenCheckpoint open = OpenCheckpoint.open(ckpt)) {
            List<TensorInfo> tensors = open.checkpoint().select(List.of());
            Map<String, TableDigests> record = DigestSidecar.computeRecord(open, tensors, 2, done -> { });
            return new Setup(ckpt, tensors, record);
        }
    }

    private static FileExporter exporter(Setup s) throws Exception {
        List<FileExporter.Table> tables = new ArrayList<>();
        for (TensorInfo t : s.tensors()) {
            tables.add(new FileExporter.Table(t.name(), t.file(), t.offset(), t.length(),
                    Long.parseUnsignedLong(s.record().get(t.name()).engramDigest(), 16)));
        }
        return new FileExporter(KEY, tables);
    }

    private static boolean awaitData(FileExporter peer, int n, long millis) {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        while (peer.datas() < n && System.nanoTime() < deadline) {
            Thread.onSpinWait();
        }
        return peer.datas() >= n;
    }

    /** The scales first (as the packed region is made first), then the weights; every one stageable. */
    private static List<TensorInfo> order(Setup s) {
        List<TensorInfo> out = new ArrayList<>();
        s.tensors().stream().filter(t -> t.name().endsWith("scale")).forEach(out::add);
        s.tensors().stream().filter(t -> !t.name().endsWith("scale")).forEach(out::add);
        return out;
    }

    private record Run(Seeder.Result result, List<Integer> sent) {
    }

    /**
     * Seeds every table with {@code staging} bytes of buffers; the scales' memory is made once 2 ranges have come
     * (or {@code firstMillis} passed), the weights' once {@code weightsAfter} have (or {@code waitMillis} passed); every table then checked against
     * the record through its memory.
     */
    private static Run seed(Setup s, long staging, long firstMillis, int weightsAfter, long waitMillis) throws Exception {
        List<TensorInfo> tables = order(s);
        List<CompletableFuture<Long>> memory = new ArrayList<>();
        List<Seeder.Table> wanted = new ArrayList<>();
        for (TensorInfo t : tables) {
            CompletableFuture<Long> f = new CompletableFuture<>();
            memory.add(f);
            TableDigests d = s.record().get(t.name());
            wanted.add(new Seeder.Table(t.name(), t.length(), Long.parseUnsignedLong(d.engramDigest(), 16),
                    HexFormat.of().parseHex(d.treeDigest()), f, true));
        }
        try (FileExporter peer = exporter(s); Closer<Mapping> owned = new Closer<>()) {
            SeedSettings settings = new SeedSettings(null, List.of(peer.address()), KEY,
                    SeedAuth.random(SeedAuth.ID_BYTES), null, staging);
            List<Integer> sent = new ArrayList<>();
            Thread creator = new Thread(() -> {
                awaitData(peer, 2, firstMillis);
                sent.add(peer.datas());
                for (int i = 0; i < tables.size(); i++) {
                    if (i == 2) {
                        awaitData(peer, weightsAfter, waitMillis);
                        sent.add(peer.datas());
                    }
                    memory.get(i).complete(owned.add(Posix.mmapAnonymous(tables.get(i).length(), "table " + i))
                            .address());
                }
            });
            creator.start();
            Seeder.Result r = new Seeder(settings, 2, line -> { }, n -> { }).seed(wanted);
            creator.join();
            assertEquals(tables.size(), r.digests().size(), "every table seeded: " + r);
            for (int i = 0; i < tables.size(); i++) { // the bytes in each table's memory are the record's
                byte[] tree = TreeDigest.digest(memory.get(i).get(), tables.get(i).length(), 2);
                assertEquals(s.record().get(tables.get(i).name()).treeDigest(), TreeDigest.hex(tree),
                        tables.get(i).name());
            }
            return new Run(r, sent);
        }
    }

    @Test
    void shouldCopyWhatIsStagedIntoMemoryThatExistsWhileWaitingForTheRest(@TempDir Path dir) throws Exception {
        // two buffers: the scales' two ranges fill them; the streams then wait for the weights' memory, and must copy
        // the scales into theirs meanwhile, which frees both buffers for the weights' two ranges
        Run run = seed(checkpoint(dir), 128L << 20, 10_000, 4, 10_000);
        assertEquals(2, run.sent().get(0), "both scales staged before their memory existed: " + run.sent());
        assertEquals(4, run.sent().get(1), "the weights' ranges staged once the scales were copied out: " + run.sent());
        assertEquals(2 * (2L << 20) + 2 * (64L << 20), run.result().stagedBytes(), "every range went through a buffer");
        assertEquals(2, run.result().stagingBuffers(), "the buffers were used again, never more than the budget");
    }

    @Test
    void shouldWaitForTheMemoryOnceTheStagingIsSpent(@TempDir Path dir) throws Exception {
        // one buffer: one range staged, and no more come while nothing else exists to copy it into
        Setup s = checkpoint(dir);
        Run run = seed(s, 64L << 20, 1_500, 99, 1_500);
        assertEquals(1, run.sent().get(0), "one range staged, the other stream waiting: " + run.sent());
        assertEquals(1, run.result().stagingBuffers(), "one buffer: " + run.result());
    }
}
