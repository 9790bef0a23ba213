package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TreeDigest;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiPredicate;

/** The tables of one round given to the peers, and each table's transfer as chunks. */
final class SeedPlan {
    private SeedPlan() {
    }

    /** One table's transfer in a round: each chunk's XXH64 and each leaf's SHA-256, filled as the ranges land. */
    static final class Job {
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

    /** Chunk {@code index} of a job's table: the {@link ContentDigest#CHUNK} bytes from {@code index * CHUNK}. */
    record Chunk(Job job, int index) {
    }

    /**
     * Gives each pending table to the live peer holding it with the fewest bytes given so far, largest first; never
     * to a peer that {@code refused} says sent that table with other digests before.
     */
    static Map<SeedPeer, List<Job>> assign(List<Seeder.Table> tables, Set<Integer> pending, List<SeedPeer> peers,
            BiPredicate<Integer, SeedPeer> refused) {
        Map<SeedPeer, Long> load = new HashMap<>();
        Map<SeedPeer, List<Job>> plan = new LinkedHashMap<>();
        List<Integer> order = new ArrayList<>(pending);
        order.sort(Comparator.comparingLong((Integer i) -> tables.get(i).bytes()).reversed().thenComparing(i -> i));
        for (int i : order) {
            Seeder.Table t = tables.get(i);
            SeedPeer best = null;
            for (SeedPeer p : peers) {
                if (p.dead || !p.tables.containsKey(t.name()) || refused.test(i, p)) {
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

    /** A peer's chunks in the order the caller creates their memory in: its jobs by table, each chunk in order. */
    static List<Chunk> chunks(List<Job> jobs) {
        List<Job> sorted = new ArrayList<>(jobs);
        sorted.sort(Comparator.comparingInt(j -> j.table));
        List<Chunk> out = new ArrayList<>();
        for (Job j : sorted) {
            for (int c = 0; c < j.hashes.length; c++) {
                out.add(new Chunk(j, c));
            }
        }
        return out;
    }
}
