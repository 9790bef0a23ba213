package io.engramhost.store;

import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.numa.Placement;
import io.engramhost.numa.PlacementReport;
import io.engramhost.os.Posix;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The last stage of a host load's regions, once filled: each region's node (the one most of its pages are on,
 * verified with move_pages where the kernel allows; STATUS's placement), then every region sealed, both spread over
 * the load's threads (move_pages over tens of millions of 4 KiB pages, and unmapping the writable views, take seconds
 * on one thread). A table over a run has one node in the manifest: where its regions are on different nodes, the
 * run's regions say -1, unknown.
 */
final class Sealer {
    private static final System.Logger LOG = System.getLogger(HostCatalogBuilder.class.getName());
    /** Pieces the placement check works in, spread over the load's threads. */
    private static final long VERIFY_PIECE = 1L << 30;

    private final HostRegionFactory factory;
    private final int threads;

    Sealer(HostRegionFactory factory, int threads) {
        this.factory = factory;
        this.threads = threads;
    }

    /** Verifies placement and seals {@code regions}; each region's node for the manifest (-1: unknown). */
    int[] seal(List<HostRegion> regions, RegionPlan plan, List<TensorInfo> tensors, LoadProgress progress)
            throws InterruptedException {
        int[] node = verifyPlacementAndSeal(regions, progress);
        sameNodeInRuns(node, plan, tensors);
        return node;
    }

    private int[] verifyPlacementAndSeal(List<HostRegion> regions, LoadProgress progress) throws InterruptedException {
        record Piece(int region, long offset, long length) {
        }
        long page = factory.granule() > Posix.pageSize() && factory.kind().memfd() ? factory.granule() : Posix.pageSize();
        List<Piece> pieces = new ArrayList<>();
        for (int i = 0; i < regions.size(); i++) {
            for (long off = 0; off < regions.get(i).size(); off += VERIFY_PIECE) {
                pieces.add(new Piece(i, off, Math.min(VERIFY_PIECE, regions.get(i).size() - off)));
            }
        }
        List<Map<Integer, Long>> byRegion = new ArrayList<>();
        regions.forEach(r -> byRegion.add(new TreeMap<>()));
        AtomicReference<String> unverified = new AtomicReference<>();
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(threads, pieces.size())), r -> {
            Thread t = new Thread(r, "engram-verify");
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<?>> done = new ArrayList<>();
            for (Piece p : pieces) {
                done.add(pool.submit(() -> {
                    try {
                        PlacementReport r = Placement.verify(regions.get(p.region).address() + p.offset, p.length, page);
                        synchronized (byRegion) {
                            r.pagesByNode().forEach((n, c) -> byRegion.get(p.region).merge(n, c, Long::sum));
                        }
                    } catch (RuntimeException e) {
                        unverified.compareAndSet(null, e.getMessage());
                    }
                }));
            }
            waitAll(done);
            done.clear();
            for (HostRegion r : regions) {
                done.add(pool.submit(r::seal));
            }
            waitAll(done);
        } finally {
            pool.shutdownNow();
        }
        int[] node = new int[regions.size()];
        Map<Integer, Long> pagesByNode = new TreeMap<>();
        for (int i = 0; i < regions.size(); i++) {
            node[i] = byRegion.get(i).entrySet().stream().max(Map.Entry.comparingByValue()).map(Map.Entry::getKey)
                    .orElse(factory.node());
            byRegion.get(i).forEach((n, c) -> pagesByNode.merge(n, c, Long::sum));
        }
        LoadReport.Placement placement = new LoadReport.Placement(pagesByNode, unverified.get());
        progress.report(r -> r.withPlacement(placement));
        return node;
    }

    /**
     * A table over a run has one node in the manifest, and a client checks every region of the run against it: where
     * the placement check found the run's regions on different nodes (HOST_NUMA memory is made on one), the run's
     * regions and table say -1, unknown, with a warning.
     */
    private static void sameNodeInRuns(int[] regionNode, RegionPlan plan, List<TensorInfo> tensors) {
        for (int t = 0; t < tensors.size(); t++) {
            RegionPlan.Slot slot = plan.slots().get(t);
            boolean same = true;
            for (int k = 1; k < slot.regions(); k++) {
                same &= regionNode[slot.region() + k] == regionNode[slot.region()];
            }
            if (!same) {
                LOG.log(System.Logger.Level.WARNING, "table '" + tensors.get(t).name() + "': its " + slot.regions()
                        + " regions are not all on one NUMA node; the manifest gives its node as -1 (unknown)");
                for (int k = 0; k < slot.regions(); k++) {
                    regionNode[slot.region() + k] = -1;
                }
            }
        }
    }

    /** Waits for every task; rethrows the first failure's cause. */
    private static void waitAll(List<Future<?>> futures) throws InterruptedException {
        for (Future<?> f : futures) {
            try {
                f.get();
            } catch (ExecutionException e) {
                Throwable c = e.getCause();
                throw c instanceof RuntimeException re ? re : new IllegalStateException(c);
            }
        }
    }
}
