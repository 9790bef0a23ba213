package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.os.RawMemory;
import java.io.IOException;
import java.net.SocketException;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

/**
 * One stream of a peer in a round: one connection that takes the peer's chunks from their queue in turn, asks for
 * each, reads it straight into its table's memory (or, with staging, into a buffer of the {@link StagingPool} while
 * that memory does not exist yet) hashing it as it lands, and counts it towards its table in the
 * {@link SeedOutcome}. A failure of the peer drops it (its unfinished tables go to another peer or the disk), in one
 * line to the log for all its streams.
 */
final class SeedStream {
    /** How often a stream with nothing to do but wait for a region looks for staged ranges it can copy. */
    private static final long STAGING_POLL_MILLIS = 10;

    /** A chunk received and hashed into a staging buffer, waiting for its table's memory. */
    record Staged(SeedPlan.Chunk chunk, long buffer, int length) {
    }

    /**
     * What the streams of one peer in one round share: its chunks left, what they staged, and whether its failure was
     * logged.
     */
    static final class Share {
        final SeedPeer peer;
        final ConcurrentLinkedQueue<SeedPlan.Chunk> queue;
        final ConcurrentLinkedQueue<Staged> staged = new ConcurrentLinkedQueue<>();
        final AtomicBoolean failedLogged = new AtomicBoolean();

        Share(SeedPeer peer, List<SeedPlan.Chunk> chunks) {
            this.peer = peer;
            this.queue = new ConcurrentLinkedQueue<>(chunks);
        }
    }

    private final SeedSettings settings;
    private final List<Seeder.Table> tables;
    /** Null without staging. */
    private final StagingPool pool;
    private final SeedOutcome outcome;
    private final Consumer<String> log;
    private final SeedPeer p;
    private final ConcurrentLinkedQueue<SeedPlan.Chunk> queue;
    private final ConcurrentLinkedQueue<Staged> staged;
    private final AtomicBoolean failedLogged;

    SeedStream(SeedSettings settings, List<Seeder.Table> tables, StagingPool pool, SeedOutcome outcome,
            Consumer<String> log, Share share) {
        this.settings = settings;
        this.tables = tables;
        this.pool = pool;
        this.outcome = outcome;
        this.log = log;
        this.p = share.peer;
        this.queue = share.queue;
        this.staged = share.staged;
        this.failedLogged = share.failedLogged;
    }

    /** Runs until the peer's queue is empty, the peer is dropped or seeding stops; on {@code given}, else a new one. */
    void run(PeerConnection given) {
        PeerConnection c = given;
        ChunkHasher hasher = new ChunkHasher();
        long stage = 0; // the staging buffer the current chunk lands in (0: its table's memory)
        long nextStage = 0; // the one taken for the chunk asked ahead
        try {
            // One range asked ahead: the next chunk's RANGE goes out before this one's DATA is read and hashed, so
            // the peer sends it while this thread hashes (the exporter keeps one request waiting behind its answer).
            // It is asked ahead only when its region exists already, or a staging buffer is there to take it, so
            // that no answer waits on a creation.
            SeedPlan.Chunk k = !p.dead && !outcome.stopped() ? queue.poll() : null;
            boolean asked = false;
            while (k != null) {
                if (!copyStaged(false)) {
                    return;
                }
                Seeder.Table t = tables.get(k.job().table);
                long off = k.index() * ContentDigest.CHUNK;
                int len = (int) Math.min(ContentDigest.CHUNK, t.bytes() - off);
                stage = nextStage;
                nextStage = 0;
                if (stage == 0 && pool != null && t.stageable()) {
                    stage = bufferOrMemory(t, k.index());
                    if (stage < 0) {
                        stage = 0;
                        return;
                    }
                }
                long into;
                if (stage != 0) {
                    into = stage;
                } else {
                    into = addressOf(t, k.index());
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
                SeedPlan.Chunk n = !p.dead && !outcome.stopped() ? queue.poll() : null;
                asked = false;
                if (n != null) {
                    Seeder.Table nt = tables.get(n.job().table);
                    boolean exists = nt.memory().chunk(n.index()).isDone();
                    if (!exists && pool != null && nt.stageable()) {
                        nextStage = pool.take();
                    }
                    if (exists || nextStage != 0) {
                        long noff = n.index() * ContentDigest.CHUNK;
                        c.ask(p.index.get(nt.name()), noff, (int) Math.min(ContentDigest.CHUNK, nt.bytes() - noff));
                        asked = true;
                    }
                }
                hasher.begin(k.index(), len, k.job().leaves); // hashed as it lands, while the cache holds it
                c.receive(p.index.get(t.name()), off, len, into, hasher::update);
                k.job().hashes[k.index()] = hasher.end();
                p.lastNanos.accumulateAndGet(System.nanoTime(), Math::max);
                if (stage != 0) {
                    staged.add(new Staged(k, stage, len));
                    stage = 0;
                } else if (!outcome.counted(p, k)) {
                    return;
                }
                k = n;
            }
            // nothing left to ask for: what is staged goes into its memory as that comes to exist
            copyStaged(true);
        } catch (InterruptedException e) {
            outcome.stop();
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

    /** "reset" or "broken pipe" where {@code e} says the peer ended the connection abruptly, else null. */
    private static String closedBy(Exception e) {
        String m = e instanceof SocketException ? String.valueOf(e.getMessage()).toLowerCase(Locale.ROOT)
                : "";
        return m.contains("reset") ? "reset" : m.contains("broken pipe") ? "broken pipe" : null;
    }

    /** The address of {@code t}'s chunk {@code index}, once its memory exists; 0 (and seeding stops) when it never will. */
    private long addressOf(Seeder.Table t, int index) throws InterruptedException {
        try {
            return t.memory().chunk(index).get();
        } catch (ExecutionException | CancellationException e) {
            outcome.stop();
            return 0;
        }
    }

    /**
     * Copies staged chunks into their tables' memory: every one whose memory exists already, or with {@code all}
     * every one, waiting for its memory. False when a table they completed was refused (the peer is dropped) or the
     * caller's memory will never exist.
     */
    private boolean copyStaged(boolean all) throws InterruptedException {
        while (!p.dead && !outcome.stopped()) {
            for (Staged s : staged) { // weakly consistent: each one is copied by the stream whose remove succeeds
                Future<Long> memory = tables.get(s.chunk.job().table).memory().chunk(s.chunk.index());
                if (!memory.isDone() || !staged.remove(s)) {
                    continue;
                }
                long into = addressOf(tables.get(s.chunk.job().table), s.chunk.index());
                if (into == 0) {
                    pool.give(s.buffer, 0);
                    return false;
                }
                RawMemory.copy(null, s.buffer, null, into, s.length);
                pool.give(s.buffer, s.length);
                p.lastNanos.accumulateAndGet(System.nanoTime(), Math::max);
                if (!outcome.counted(p, s.chunk)) {
                    return false;
                }
            }
            Staged first = staged.peek();
            if (!all || first == null) {
                return true;
            }
            if (!awaitMemory(tables.get(first.chunk.job().table), first.chunk.index())) {
                return false;
            }
        }
        return true;
    }

    /** Waits up to {@link #STAGING_POLL_MILLIS} for {@code t}'s memory; false when it will never exist. */
    private boolean awaitMemory(Seeder.Table t, int index) throws InterruptedException {
        try {
            t.memory().chunk(index).get(STAGING_POLL_MILLIS, TimeUnit.MILLISECONDS);
            return true;
        } catch (TimeoutException e) {
            return true;
        } catch (ExecutionException | CancellationException e) {
            outcome.stop();
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
    private long bufferOrMemory(Seeder.Table t, int index) throws InterruptedException {
        while (!t.memory().chunk(index).isDone()) {
            if (!copyStaged(false) || p.dead || outcome.stopped()) {
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
}
