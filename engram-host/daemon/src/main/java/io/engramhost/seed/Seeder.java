package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.os.RawMemory;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
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

    private static final class Peer {
        final InetSocketAddress address;
        final String name;
        final Map<String, Integer> index = new HashMap<>();
        final Map<String, SeedWire.Table> tables = new HashMap<>();
        PeerConnection first;
        volatile boolean dead;
        final AtomicLong bytes = new AtomicLong();
        final AtomicLong firstNanos = new AtomicLong();
        final AtomicLong lastNanos = new AtomicLong();

        Peer(InetSocketAddress address) {
            this.address = address;
            this.name = SeedSettings.show(address);
        }
    }

    /** One table's transfer in a round: each chunk's XXH64 and each leaf's SHA-256, filled as the ranges land. */
    private static final class Job {
        final int table;
        final long[] hashes;
        final byte[][] leaves;
        final AtomicInteger left;

        Job(int table, long bytes) {
            this.table = table;
            this.hashes = new long[(int) ((bytes + ContentDigest.CHUNK - 1) / ContentDigest.CHUNK)];
            this.leaves = new byte[(int) ((bytes + TreeDigest.CHUNK - 1) / TreeDigest.CHUNK)][];
            this.left = new AtomicInteger(hashes.length);
        }
    }

    private record Chunk(Job job, int index) {
    }

    /** A chunk received and hashed into a staging buffer, waiting for its table's memory. */
    private record Staged(Chunk chunk, long buffer, int length) {
    }

    /** Set for the length of {@link #seed} when staging is on. */
    private StagingPool pool;
    /** How often a stream with nothing to do but wait for a region looks for staged ranges it can copy. */
    private static final long STAGING_POLL_MILLIS = 10;
    /**
     * The most peers one seed asks: a longer list (a headless service of a large fleet) is cut to this many, chosen at
     * random, so that the new nodes of a fleet spread over its daemons instead of all asking the first ones.
     */
    static final int MAX_PEERS = 64;

    /** Seeds {@code tables}; never throws for a peer's fault (that table goes back to the caller). */
    public Result seed(List<Table> tables) throws InterruptedException {
        List<Peer> peers = discover(tables);
        Map<Integer, Long> digests = new LinkedHashMap<>();
        Map<Integer, String> from = new LinkedHashMap<>();
        Map<Integer, Set<Peer>> refusedFor = new HashMap<>();
        Set<Integer> pending = new HashSet<>();
        for (int i = 0; i < tables.size(); i++) {
            pending.add(i);
        }
        AtomicInteger liars = new AtomicInteger();
        Set<Integer> treeRefused = Collections.synchronizedSet(new HashSet<>());
        long staged;
        int buffers;
        try (StagingPool p = settings.stagingBytes() >= ContentDigest.CHUNK ? new StagingPool(settings.stagingBytes())
                : null) {
            pool = p;
            while (!pending.isEmpty() && !aborted) {
                Map<Peer, List<Job>> plan = assign(tables, pending, peers, refusedFor);
                if (plan.isEmpty()) {
                    break;
                }
                round(tables, plan, digests, from, refusedFor, liars, treeRefused);
                pending.removeAll(digests.keySet());
            }
            staged = p == null ? 0 : p.bytesStaged();
            buffers = p == null ? 0 : p.buffers();
        } finally {
            pool = null;
        }
        for (Peer p : peers) {
            if (p.first != null) {
                p.first.close();
                p.first = null;
            }
        }
        List<Integer> notSeeded = new ArrayList<>(pending);
        notSeeded.sort(null);
        List<Source> sources = new ArrayList<>();
        for (Peer p : peers) {
            if (p.bytes.get() > 0) {
                sources.add(new Source(p.name, p.bytes.get(), (p.lastNanos.get() - p.firstNanos.get()) / 1e9));
            }
        }
        return new Result(digests, from, notSeeded, sources, refusedPeers + liars.get(), Set.copyOf(treeRefused),
                aborted, staged, buffers);
    }

    private int refusedPeers;
    /** Set when a table's memory will never exist: the caller's creation failed. */
    private volatile boolean aborted;

    /** Connects to every peer at once and reads its manifest; the usable ones, with their first connection open. */
    private List<Peer> discover(List<Table> tables) throws InterruptedException {
        List<Peer> all = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        for (InetSocketAddress a : settings.peers()) {
            Peer p = new Peer(a);
            if (!seen.add(p.name)) {
                continue;
            }
            if (settings.listen() != null && a.equals(settings.listen())) {
                log.accept("seed: peer " + p.name + " is this daemon's own --seed-listen address; skipping it");
                continue;
            }
            all.add(p);
        }
        if (all.size() > MAX_PEERS) {
            log.accept("seed: " + all.size() + " peers listed; asking " + MAX_PEERS + " of them, chosen at random (at"
                    + " most " + MAX_PEERS + " a seed)");
            Collections.shuffle(all);
            all = new ArrayList<>(all.subList(0, MAX_PEERS));
        }
        Map<String, Table> wanted = new HashMap<>();
        tables.forEach(t -> wanted.put(t.name(), t));
        List<Thread> threads = new ArrayList<>();
        List<Peer> usable = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger refused = new AtomicInteger();
        for (Peer p : all) {
            Thread t = new Thread(() -> {
                try {
                    PeerConnection c = PeerConnection.open(p.address, settings.key(), settings.instanceId(),
                            settings.tls());
                    SeedWire.Manifest m;
                    try {
                        m = c.manifest(wanted.keySet());
                    } catch (IOException | RuntimeException e) {
                        c.close();
                        throw e;
                    }
                    int matching = 0;
                    String firstDifference = null;
                    for (int k = 0; k < m.tables().size(); k++) {   // only the tables this daemon loads
                        SeedWire.Table st = m.tables().get(k);
                        Table w = wanted.get(st.name());
                        if (st.bytes() == w.bytes() && st.digest() == w.expectedDigest()) {
                            p.index.put(st.name(), m.indices().get(k));
                            p.tables.put(st.name(), st);
                            matching++;
                        } else if (firstDifference == null) {
                            firstDifference = "table '" + st.name() + "' has " + st.bytes() + " bytes and engram digest"
                                    + " v1 " + ContentDigest.hex(st.digest()) + ", this checkpoint's "
                                    + w.bytes() + " and " + ContentDigest.hex(w.expectedDigest());
                        }
                    }
                    if (matching == 0) {
                        c.close();
                        refused.incrementAndGet();
                        log.accept("seed: peer " + p.name + " serves another checkpoint (fingerprint "
                                + m.fingerprintSha256().substring(0, 16) + "...: "
                                + (firstDifference != null ? firstDifference : "none of this daemon's tables")
                                + "); skipping it");
                        return;
                    }
                    if (firstDifference != null) {
                        log.accept("seed: peer " + p.name + " holds " + matching + " of the tables; others differ ("
                                + firstDifference + ")");
                    }
                    p.first = c;
                    usable.add(p);
                } catch (PeerConnection.PeerException e) {
                    if (!e.benign) {
                        refused.incrementAndGet();
                    }
                    log.accept("seed: " + e.getMessage() + "; skipping it");
                } catch (IOException | RuntimeException e) {
                    refused.incrementAndGet();
                    log.accept("seed: peer " + p.name + ": " + e + "; skipping it");
                }
            }, "engram-seed-peer");
            t.setDaemon(true);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        refusedPeers = refused.get();
        List<Peer> out = new ArrayList<>();
        for (Peer p : all) { // in the order given
            if (usable.contains(p)) {
                out.add(p);
            }
        }
        return out;
    }

    /** Gives each pending table to the live peer holding it with the fewest bytes given so far; largest first. */
    private static Map<Peer, List<Job>> assign(List<Table> tables, Set<Integer> pending, List<Peer> peers,
            Map<Integer, Set<Peer>> refusedFor) {
        Map<Peer, Long> load = new HashMap<>();
        Map<Peer, List<Job>> plan = new LinkedHashMap<>();
        List<Integer> order = new ArrayList<>(pending);
        order.sort(Comparator.comparingLong((Integer i) -> tables.get(i).bytes()).reversed().thenComparing(i -> i));
        for (int i : order) {
            Table t = tables.get(i);
            Peer best = null;
            for (Peer p : peers) {
                if (p.dead || !p.tables.containsKey(t.name()) || refusedFor.getOrDefault(i, Set.of()).contains(p)) {
                    continue;
                }
                if (best == null || load.getOrDefault(p, 0L) < load.getOrDefault(best, 0L)) {
                    best = p;
                }
            }
            if (best == null) {
                continue;
            }
            load.merge(best, t.bytes(), Long::sum);
            plan.computeIfAbsent(best, k -> new ArrayList<>()).add(new Job(i, t.bytes()));
        }
        return plan;
    }

    /** One round: every peer's jobs on its streams, in the caller's order, until done or the peer fails. */
    private void round(List<Table> tables, Map<Peer, List<Job>> plan, Map<Integer, Long> digests,
            Map<Integer, String> from, Map<Integer, Set<Peer>> refusedFor, AtomicInteger liars,
            Set<Integer> treeRefused) throws InterruptedException {
        int perPeer = Math.max(1, streams / plan.size());
        List<Thread> threads = new ArrayList<>();
        List<ConcurrentLinkedQueue<Staged>> stagedByPeer = new ArrayList<>();
        for (Map.Entry<Peer, List<Job>> e : plan.entrySet()) {
            Peer p = e.getKey();
            ConcurrentLinkedQueue<Chunk> queue = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<Staged> staged = new ConcurrentLinkedQueue<>();
            stagedByPeer.add(staged);
            List<Job> jobs = new ArrayList<>(e.getValue());
            jobs.sort(Comparator.comparingInt(j -> j.table)); // the order the caller creates their memory in
            for (Job j : jobs) {
                for (int c = 0; c < j.hashes.length; c++) {
                    queue.add(new Chunk(j, c));
                }
            }
            AtomicBoolean failedLogged = new AtomicBoolean();
            for (int s = 0; s < perPeer; s++) {
                PeerConnection given = s == 0 ? p.first : null;
                if (s == 0) {
                    p.first = null;
                }
                Thread t = new Thread(() -> stream(p, given, queue, staged, tables, digests, from, refusedFor, liars,
                        treeRefused, failedLogged), "engram-seed");
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
                    aborted = true;
                }
            }
        }
        // what a peer that failed (or a creation that failed) left staged is dropped: its tables are not done, and
        // go to another peer or the disk whole
        for (ConcurrentLinkedQueue<Staged> q : stagedByPeer) {
            for (Staged s = q.poll(); s != null; s = q.poll()) {
                pool.give(s.buffer, 0);
            }
        }
        if (interrupted) {
            throw new InterruptedException("seeding interrupted");
        }
    }

    /** The address of {@code t}'s chunk {@code index}, once its memory exists; 0 (and seeding stops) when it never will. */
    private long addressOf(Table t, int index) throws InterruptedException {
        try {
            return t.memory().chunk(index).get();
        } catch (ExecutionException | CancellationException e) {
            aborted = true;
            return 0;
        }
    }

    /** "reset" or "broken pipe" where {@code e} says the peer ended the connection abruptly, else null. */
    private static String closedBy(Exception e) {
        String m = e instanceof SocketException ? String.valueOf(e.getMessage()).toLowerCase(Locale.ROOT)
                : "";
        return m.contains("reset") ? "reset" : m.contains("broken pipe") ? "broken pipe" : null;
    }

    private void stream(Peer p, PeerConnection given, ConcurrentLinkedQueue<Chunk> queue,
            ConcurrentLinkedQueue<Staged> staged, List<Table> tables, Map<Integer, Long> digests,
            Map<Integer, String> from, Map<Integer, Set<Peer>> refusedFor, AtomicInteger liars,
            Set<Integer> treeRefused, AtomicBoolean failedLogged) {
        PeerConnection c = given;
        ChunkHasher hasher = new ChunkHasher();
        long stage = 0; // the staging buffer the current chunk lands in (0: its table's memory)
        long nextStage = 0; // the one taken for the chunk asked ahead
        try {
            // One range asked ahead: the next chunk's RANGE goes out before this one's DATA is read and hashed, so
            // the peer sends it while this thread hashes (the exporter keeps one request waiting behind its answer).
            // It is asked ahead only when its region exists already, or a staging buffer is there to take it, so
            // that no answer waits on a creation.
            Chunk k = !p.dead && !aborted ? queue.poll() : null;
            boolean asked = false;
            while (k != null) {
                if (!copyStaged(p, staged, false, tables, digests, from, refusedFor, liars, treeRefused)) {
                    return;
                }
                Table t = tables.get(k.job.table);
                long off = k.index * ContentDigest.CHUNK;
                int len = (int) Math.min(ContentDigest.CHUNK, t.bytes() - off);
                stage = nextStage;
                nextStage = 0;
                if (stage == 0 && pool != null && t.stageable()) {
                    stage = bufferOrMemory(p, t, k.index, staged, tables, digests, from, refusedFor, liars,
                            treeRefused);
                    if (stage < 0) {
                        stage = 0;
                        return;
                    }
                }
                long into;
                if (stage != 0) {
                    into = stage;
                } else {
                    into = addressOf(t, k.index);
                    if (into == 0) {
                        return;
                    }
                }
                if (c == null) {
                    c = PeerConnection.open(p.address, settings.key(), settings.instanceId(), settings.tls());
                }
                long t0 = System.nanoTime();
                p.firstNanos.compareAndSet(0, t0);
                if (!asked) {
                    c.ask(p.index.get(t.name()), off, len);
                }
                Chunk n = !p.dead && !aborted ? queue.poll() : null;
                asked = false;
                if (n != null) {
                    Table nt = tables.get(n.job.table);
                    boolean exists = nt.memory().chunk(n.index).isDone();
                    if (!exists && pool != null && nt.stageable()) {
                        nextStage = pool.take();
                    }
                    if (exists || nextStage != 0) {
                        long noff = n.index * ContentDigest.CHUNK;
                        c.ask(p.index.get(nt.name()), noff, (int) Math.min(ContentDigest.CHUNK, nt.bytes() - noff));
                        asked = true;
                    }
                }
                hasher.begin(k.index, len, k.job.leaves); // hashed as it lands, while the cache holds it
                c.receive(p.index.get(t.name()), off, len, into, hasher::update);
                k.job.hashes[k.index] = hasher.end();
                p.lastNanos.accumulateAndGet(System.nanoTime(), Math::max);
                if (stage != 0) {
                    staged.add(new Staged(k, stage, len));
                    stage = 0;
                } else if (!counted(p, k, tables, digests, from, refusedFor, liars, treeRefused)) {
                    return;
                }
                k = n;
            }
            // nothing left to ask for: what is staged goes into its memory as that comes to exist
            copyStaged(p, staged, true, tables, digests, from, refusedFor, liars, treeRefused);
        } catch (InterruptedException e) {
            aborted = true;
            Thread.currentThread().interrupt();
        } catch (IOException | RuntimeException e) {
            p.dead = true;
            if (failedLogged.compareAndSet(false, true)) {
                log.accept("seed: " + (e instanceof PeerConnection.PeerException ? e.getMessage()
                        : closedBy(e) != null ? "peer " + p.name + " closed the connection (" + closedBy(e) + ")"
                        : "peer " + p.name + ": " + e) + " during the transfer; its unfinished tables go to another"
                        + " peer or the disk");
            }
        } finally {
            if (stage != 0) {
                pool.give(stage, 0);
            }
            if (nextStage != 0) {
                pool.give(nextStage, 0);
            }
            if (c != null) {
                c.close();
            }
        }
    }

    /**
     * Copies staged chunks into their tables' memory: every one whose memory exists already, or with {@code all}
     * every one, waiting for its memory. False when a table they completed was refused (the peer is dropped) or the
     * caller's memory will never exist.
     */
    private boolean copyStaged(Peer p, ConcurrentLinkedQueue<Staged> staged, boolean all, List<Table> tables,
            Map<Integer, Long> digests, Map<Integer, String> from, Map<Integer, Set<Peer>> refusedFor,
            AtomicInteger liars, Set<Integer> treeRefused) throws InterruptedException {
        while (!p.dead && !aborted) {
            for (Staged s : staged) { // weakly consistent: each one is copied by the stream whose remove succeeds
                Future<Long> memory = tables.get(s.chunk.job.table).memory().chunk(s.chunk.index);
                if (!memory.isDone() || !staged.remove(s)) {
                    continue;
                }
                long into = addressOf(tables.get(s.chunk.job.table), s.chunk.index);
                if (into == 0) {
                    pool.give(s.buffer, 0);
                    return false;
                }
                RawMemory.copy(null, s.buffer, null, into, s.length);
                pool.give(s.buffer, s.length);
                p.lastNanos.accumulateAndGet(System.nanoTime(), Math::max);
                if (!counted(p, s.chunk, tables, digests, from, refusedFor, liars, treeRefused)) {
                    return false;
                }
            }
            Staged first = staged.peek();
            if (!all || first == null) {
                return true;
            }
            if (!awaitMemory(tables.get(first.chunk.job.table), first.chunk.index)) {
                return false;
            }
        }
        return true;
    }

    /** Waits up to {@link #STAGING_POLL_MILLIS} for {@code t}'s memory; false when it will never exist. */
    private boolean awaitMemory(Table t, int index) throws InterruptedException {
        try {
            t.memory().chunk(index).get(STAGING_POLL_MILLIS, TimeUnit.MILLISECONDS);
            return true;
        } catch (TimeoutException e) {
            return true;
        } catch (ExecutionException | CancellationException e) {
            aborted = true;
            return false;
        }
    }

    /**
     * With staging, for a range of {@code t}: a staging buffer while {@code t}'s memory does not exist, or 0 once it
     * does. While neither is there (every buffer holds a range), it copies what is staged into memory that has come
     * to exist meanwhile, which gives buffers back, and looks again every {@link #STAGING_POLL_MILLIS}: a stream
     * waiting for one region never holds up the ranges of another that exists. -1: stop (a refused table, a dead
     * peer, or memory that will never exist).
     */
    private long bufferOrMemory(Peer p, Table t, int index, ConcurrentLinkedQueue<Staged> staged, List<Table> tables,
            Map<Integer, Long> digests, Map<Integer, String> from, Map<Integer, Set<Peer>> refusedFor,
            AtomicInteger liars, Set<Integer> treeRefused) throws InterruptedException {
        while (!t.memory().chunk(index).isDone()) {
            if (!copyStaged(p, staged, false, tables, digests, from, refusedFor, liars, treeRefused) || p.dead
                    || aborted) {
                return -1;
            }
            long b = pool.take();
            if (b != 0) {
                return b;
            }
            if (!awaitMemory(t, index)) {
                return -1;
            }
        }
        return 0;
    }

    /**
     * Counts chunk {@code k}, hashed and in its table's memory, towards its table; the last one decides the table:
     * accepted with both digests the record's, or refused, which drops the peer. False when refused.
     */
    private boolean counted(Peer p, Chunk k, List<Table> tables, Map<Integer, Long> digests, Map<Integer, String> from,
            Map<Integer, Set<Peer>> refusedFor, AtomicInteger liars, Set<Integer> treeRefused) {
        if (k.job.left.decrementAndGet() != 0) { // every chunk's hashes are visible at 0: the decrements order them
            return true;
        }
        Table t = tables.get(k.job.table);
        long d = ContentDigest.combine(k.job.hashes);
        String lie = null;
        if (d != t.expectedDigest()) {
            lie = "engram digest v1 " + ContentDigest.hex(d) + ", not the record's "
                    + ContentDigest.hex(t.expectedDigest());
        } else {
            byte[] tree = TreeDigest.rootOf(t.bytes(), k.job.leaves);
            if (!MessageDigest.isEqual(tree, t.expectedTree())) {
                treeRefused.add(k.job.table);
                lie = TreeDigest.ALGORITHM + " " + TreeDigest.hex(tree) + ", not the record's "
                        + TreeDigest.hex(t.expectedTree()) + " (its engram digest v1 is the record's)";
            }
        }
        if (lie != null) {
            p.dead = true;
            liars.incrementAndGet();
            synchronized (refusedFor) {
                refusedFor.computeIfAbsent(k.job.table, x -> new HashSet<>()).add(p);
            }
            log.accept("seed: table '" + t.name() + "' from peer " + p.name + " has " + lie
                    + "; dropping the peer and fetching the table again from another peer or the disk");
            return false;
        }
        synchronized (digests) {
            digests.put(k.job.table, d);
            from.put(k.job.table, p.name);
        }
        p.bytes.addAndGet(t.bytes());
        progress.accept(t.bytes());
        return true;
    }
}
