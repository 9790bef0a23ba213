package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;
import java.util.function.LongConsumer;
import java.util.function.ToLongFunction;

/**
 * Fills tables from peers (docs/seeding.md, "The requester"): asks each peer for its manifest, gives each table to
 * a peer that holds it with the same size and the engram digest v1 the caller expects (the digest record's), reads
 * its 64 MiB chunks on several streams per peer straight into the caller's memory, hashes each chunk as it lands
 * with both digests (its XXH64, and the SHA-256 of its four 16 MiB leaves of the sha256-tree-v1), and accepts a
 * table only when both its engram digest v1 and its sha256-tree-v1 are the expected ones. A peer that is this
 * daemon, not ready, without the key or serving other tables is skipped; a peer that fails mid-transfer or sends a
 * table whose digests differ is dropped, and its unfinished tables go to another peer in the next round. What no
 * peer delivered comes back as not seeded, for the disk. Every such event is one line to {@code log}.
 *
 * <p>A table's memory need not exist yet: its address is a {@link Future} that the caller completes once the
 * region holding it is created, so that the transfer of the first tables overlaps the creation of the next
 * (docs/seeding.md, step 3). The caller lists the tables in the order it creates them, and each peer's tables are
 * transferred in that order. A stream waits for the address of the chunk it took; when the caller's creation fails
 * (the future completes exceptionally, or is cancelled), seeding stops at once and the tables not yet verified come
 * back as not seeded; no peer is blamed. The caller owns the memory: {@link #seed} returns only after every stream
 * has ended, so no byte is written into it afterwards.
 *
 * <p>With staging ({@link SeedSettings#stagingBytes}, {@code --seed-staging}), a stream whose chunk's memory does not
 * exist yet receives and hashes it in a buffer of a {@link StagingPool} instead of waiting, and the chunk is copied
 * into its memory once that exists (by whichever stream of the peer finds it first); a chunk counts towards its
 * table only once it is there. A cuda-vmm region is committed as it is created, at the driver's rate, so without
 * staging the last large region's bytes can arrive only after it exists; with staging they can arrive meanwhile.
 * What a failed round left staged is dropped with its table, which goes to another peer or the disk.
 */
public final class Seeder {
    /**
     * A table to fill: its name, bytes, the engram digest v1 and the sha256-tree-v1 (32 bytes) it must have, where
     * its bytes go, once the caller has made that memory, and whether its ranges may be staged while that memory is
     * made ({@code stageable}; the caller says which: staging helps only where the table's fill cannot hide behind
     * the creation of what comes after it).
     */
    public record Table(String name, long bytes, long expectedDigest, byte[] expectedTree, Memory memory,
            boolean stageable) {
        public Table {
            if (expectedTree.length != 32) {
                throw new IllegalArgumentException("a sha256-tree-v1 has 32 bytes, not " + expectedTree.length);
            }
        }

        /** A table whose memory is one piece, at {@code address} once that completes. */
        public Table(String name, long bytes, long expectedDigest, byte[] expectedTree, Future<Long> address,
                boolean stageable) {
            this(name, bytes, expectedDigest, expectedTree,
                    chunk -> new AddressOf<>(address, a -> a + chunk * ContentDigest.CHUNK), stageable);
        }

        /** A table whose ranges may be staged. */
        public Table(String name, long bytes, long expectedDigest, byte[] expectedTree, Future<Long> address) {
            this(name, bytes, expectedDigest, expectedTree, address, true);
        }
    }

    /**
     * Where a table's bytes go: the address of its chunk {@code index} (the {@link ContentDigest#CHUNK} bytes from
     * {@code index * CHUNK}), once the memory holding it exists. A table over several regions has its chunks' memory
     * made one region at a time.
     */
    public interface Memory {
        Future<Long> chunk(int index);
    }

    /**
     * A future address made of another future's value ({@code at} of it), that registers nothing on that future: a
     * stream asks for its chunk's address again and again while it waits, and a {@code thenApply} each time would pile
     * up until the memory came. It cannot be cancelled: the memory is the caller's to make or to fail.
     */
    public record AddressOf<T>(Future<T> base, ToLongFunction<T> at) implements Future<Long> {
        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            return false;
        }

        @Override
        public boolean isCancelled() {
            return base.isCancelled();
        }

        @Override
        public boolean isDone() {
            return base.isDone();
        }

        @Override
        public Long get() throws InterruptedException, ExecutionException {
            return at.applyAsLong(base.get());
        }

        @Override
        public Long get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException,
                TimeoutException {
            return at.applyAsLong(base.get(timeout, unit));
        }
    }

    /** One source's share: the peer, the verified bytes it gave, and the seconds from its first byte to its last. */
    public record Source(String peer, long bytes, double seconds) {
        public double gibPerSecond() {
            return seconds > 0 ? bytes / (double) (1L << 30) / seconds : 0;
        }
    }

    /**
     * What came of it: the verified engram digest v1 of each seeded table (by index in the caller's list) and which
     * peer gave it; the tables not seeded; each source; how many peers were refused (no key, other tables, a lie);
     * and the tables a peer sent with the expected engram digest v1 but another sha256-tree-v1 (forged to pass the
     * first, or the record's tree digest is wrong: whichever source fills them next must pass the tree digest too);
     * and whether seeding stopped because the caller's memory for a table could not be made.
     */
    public record Result(Map<Integer, Long> digests, Map<Integer, String> from, List<Integer> notSeeded,
            List<Source> sources, int peersRefused, Set<Integer> treeRefused, boolean stopped, long stagedBytes,
            int stagingBuffers) {
    }

    private final SeedSettings settings;
    private final int streams;
    private final Consumer<String> log;
    private final LongConsumer progress;

    /** {@code streams}: connections in all, shared among the peers; {@code progress}: verified bytes as they come. */
    public Seeder(SeedSettings settings, int streams, Consumer<String> log, LongConsumer progress) {
        this.settings = settings;
        this.streams = Math.max(1, streams);
        this.log = log;
        this.progress = progress;
    }

    /** Seeds {@code tables}; never throws for a peer's fault (that table goes back to the caller). */
    public Result seed(List<Table> tables) throws InterruptedException {
        PeerDiscovery.Found found = PeerDiscovery.discover(settings, tables, log);
        List<SeedPeer> peers = found.peers();
        SeedOutcome outcome = new SeedOutcome(tables, log, progress);
        Set<Integer> pending = new HashSet<>();
        for (int i = 0; i < tables.size(); i++) {
            pending.add(i);
        }
        long staged;
        int buffers;
        try (StagingPool pool = settings.stagingBytes() >= ContentDigest.CHUNK
                ? new StagingPool(settings.stagingBytes()) : null) {
            while (!pending.isEmpty() && !outcome.stopped()) {
                Map<SeedPeer, List<SeedPlan.Job>> plan = SeedPlan.assign(tables, pending, peers, outcome::refused);
                if (plan.isEmpty()) {
                    break;
                }
                round(tables, plan, pool, outcome);
                pending.removeAll(outcome.seeded());
            }
            staged = pool == null ? 0 : pool.bytesStaged();
            buffers = pool == null ? 0 : pool.buffers();
        }
        for (SeedPeer p : peers) {
            if (p.first != null) {
                p.first.close();
                p.first = null;
            }
        }
        return outcome.result(pending, peers, found.refused(), staged, buffers);
    }

    /** One round: every peer's jobs on its streams, in the caller's order, until done or the peer fails. */
    private void round(List<Table> tables, Map<SeedPeer, List<SeedPlan.Job>> plan, StagingPool pool,
            SeedOutcome outcome) throws InterruptedException {
        int perPeer = Math.max(1, streams / plan.size());
        List<Thread> threads = new ArrayList<>();
        List<SeedStream.Share> shares = new ArrayList<>();
        for (Map.Entry<SeedPeer, List<SeedPlan.Job>> e : plan.entrySet()) {
            SeedPeer p = e.getKey();
            SeedStream.Share share = new SeedStream.Share(p, SeedPlan.chunks(e.getValue()));
            shares.add(share);
            for (int s = 0; s < perPeer; s++) {
                PeerConnection given = s == 0 ? p.first : null;
                if (s == 0) {
                    p.first = null;
                }
                SeedStream stream = new SeedStream(settings, tables, pool, outcome, log, share);
                Thread t = new Thread(() -> stream.run(given), "engram-seed");
                t.setDaemon(true);
                t.start();
                threads.add(t);
            }
        }
        // every stream writes into the caller's memory: none may outlive this call, even when it is interrupted
        boolean interrupted = false;
        for (Thread t : threads) {
            while (t.isAlive()) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                    outcome.stop();
                }
            }
        }
        // what a peer that failed (or a creation that failed) left staged is dropped: its tables are not done, and
        // go to another peer or the disk whole
        for (SeedStream.Share share : shares) {
            for (SeedStream.Staged s = share.staged.poll(); s != null; s = share.staged.poll()) {
                pool.give(s.buffer(), 0);
            }
        }
        if (interrupted) {
            throw new InterruptedException("seeding interrupted");
        }
    }
}
