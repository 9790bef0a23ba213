package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TreeDigest;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.function.LongConsumer;

/**
 * What one seed has come to, as its streams decide it: each table accepted (its verified engram digest v1 and its
 * peer) or refused from a peer (which drops the peer), and whether seeding stopped because the caller's memory for a
 * table will never exist; at the end, the {@link Seeder.Result}.
 */
final class SeedOutcome {
    private final List<Seeder.Table> tables;
    private final Consumer<String> log;
    private final LongConsumer progress;
    private final Map<Integer, Long> digests = new LinkedHashMap<>();
    private final Map<Integer, String> from = new LinkedHashMap<>();
    private final Map<Integer, Set<SeedPeer>> refusedFor = new HashMap<>();
    private final Set<Integer> treeRefused = new HashSet<>();
    private int liars;
    /** Set when a table's memory will never exist (the caller's creation failed), or the seed is interrupted. */
    private volatile boolean stopped;

    SeedOutcome(List<Seeder.Table> tables, Consumer<String> log, LongConsumer progress) {
        this.tables = tables;
        this.log = log;
        this.progress = progress;
    }

    void stop() {
        stopped = true;
    }

    boolean stopped() {
        return stopped;
    }

    /** The tables accepted so far. */
    synchronized Set<Integer> seeded() {
        return new HashSet<>(digests.keySet());
    }

    /** Whether peer {@code p} sent table {@code table} with other digests before. */
    synchronized boolean refused(int table, SeedPeer p) {
        return refusedFor.getOrDefault(table, Set.of()).contains(p);
    }

    /**
     * Counts chunk {@code k}, hashed and in its table's memory, towards its table; the last one decides the table:
     * accepted with both digests the record's, or refused, which drops the peer. False when refused.
     */
    boolean counted(SeedPeer p, SeedPlan.Chunk k) {
        if (k.job().left.decrementAndGet() != 0) { // every chunk's hashes are visible at 0: the decrements order them
            return true;
        }
        int i = k.job().table;
        Seeder.Table t = tables.get(i);
        long d = ContentDigest.combine(k.job().hashes);
        String lie = null;
        boolean tree = false;
        if (d != t.expectedDigest()) {
            lie = "engram digest v1 " + ContentDigest.hex(d) + ", not the record's "
                    + ContentDigest.hex(t.expectedDigest());
        } else {
            byte[] root = TreeDigest.rootOf(t.bytes(), k.job().leaves);
            if (!MessageDigest.isEqual(root, t.expectedTree())) {
                tree = true;
                lie = TreeDigest.ALGORITHM + " " + TreeDigest.hex(root) + ", not the record's "
                        + TreeDigest.hex(t.expectedTree()) + " (its engram digest v1 is the record's)";
            }
        }
        if (lie != null) {
            p.dead = true;
            synchronized (this) {
                liars++;
                if (tree) {
                    treeRefused.add(i);
                }
                refusedFor.computeIfAbsent(i, x -> new HashSet<>()).add(p);
            }
            log.accept("seed: table '" + t.name() + "' from peer " + p.name + " has " + lie
                    + "; dropping the peer and fetching the table again from another peer or the disk");
            return false;
        }
        synchronized (this) {
            digests.put(i, d);
            from.put(i, p.name);
        }
        p.bytes.addAndGet(t.bytes());
        progress.accept(t.bytes());
        return true;
    }

    /**
     * The result: the tables of {@code notSeeded} in order, each of {@code peers} that gave verified bytes as a
     * source, {@code peersRefused} at discovery beside those refused here, and what staging held.
     */
    synchronized Seeder.Result result(Collection<Integer> notSeeded, List<SeedPeer> peers, int peersRefused,
            long stagedBytes, int stagingBuffers) {
        List<Integer> left = new ArrayList<>(notSeeded);
        left.sort(null);
        List<Seeder.Source> sources = new ArrayList<>();
        for (SeedPeer p : peers) {
            if (p.bytes.get() > 0) {
                sources.add(p.source());
            }
        }
        return new Seeder.Result(new LinkedHashMap<>(digests), new LinkedHashMap<>(from), left, sources,
                peersRefused + liars, Set.copyOf(treeRefused), stopped, stagedBytes, stagingBuffers);
    }
}
