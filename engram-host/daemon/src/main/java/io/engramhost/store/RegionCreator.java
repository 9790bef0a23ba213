package io.engramhost.store;

import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;
import io.engramhost.util.RegionRuns;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * Creates a load's host regions through the backend's factory (memfd, hugetlb or cuda-vmm), in their places: a table
 * larger than the factory's largest region lies in a run of regions, back to back in one address range reserved
 * before any region is made. Either one at a time as the fill asks for each ({@link #next}), or, started
 * ({@link #start}), in a given order on a thread of its own ({@code engram-create}), each handed out ({@link #region})
 * the moment it exists, so that a seed fills the first regions while the next are created.
 *
 * <p>Each run's range and each region go to the build's {@code owned} as they are made: that is their one owner,
 * which closes them when the build fails (the runs after their regions: it closes in the reverse order of adding);
 * the creator never closes one. A creation that fails fails every region after it in that order, with its error;
 * {@link #stop} cancels the ones not begun and waits for the one under way.
 */
final class RegionCreator {
    private static final System.Logger LOG = System.getLogger(RegionCreator.class.getName());

    private final HostRegionFactory factory;
    private final List<Long> sizes;
    /** Each region's run (null: a region alone) and its offset in it. */
    private final HostRegionFactory.Run[] run;
    private final long[] offset;
    private final List<CompletableFuture<HostRegion>> regions = new ArrayList<>();
    private final Closer<AutoCloseable> owned;
    private Thread thread;
    private volatile boolean stopped;
    /** Written by the one thread that creates (the fill's, or engram-create), read after it has ended. */
    private long nanos;

    /** Reserves the address ranges of the plan's runs, owned by {@code owned}; creates no region yet. */
    RegionCreator(HostRegionFactory factory, RegionPlan plan, List<TensorInfo> tensors, Closer<AutoCloseable> owned) {
        this.factory = factory;
        this.sizes = plan.regionSizes();
        this.owned = owned;
        run = new HostRegionFactory.Run[sizes.size()];
        offset = new long[sizes.size()];
        sizes.forEach(size -> regions.add(new CompletableFuture<>()));
        for (int t = 0; t < tensors.size(); t++) {
            RegionPlan.Slot slot = plan.slots().get(t);
            if (slot.regions() <= 1) {
                continue;
            }
            long bytes = 0;
            for (int k = 0; k < slot.regions(); k++) {
                offset[slot.region() + k] = RegionRuns.start(k, factory.maxRegion());
                bytes += sizes.get(slot.region() + k);
            }
            HostRegionFactory.Run r = owned.add(factory.reserveRun(bytes, "table " + tensors.get(t).name()));
            for (int k = 0; k < slot.regions(); k++) {
                run[slot.region() + k] = r;
            }
        }
    }

    /**
     * The order a seeded load creates its regions in: the largest first (ties in the plan's order), a run's regions
     * by the run's size, so that a run stays whole. A region is filled only once it exists, so the seed ends at best
     * one fill of the last large region after the creation ends; the small ones, created last, are filled while that
     * fill runs (bench/seed-runs.md, "Runs 37-39").
     */
    static List<Integer> creationOrder(RegionPlan plan) {
        List<Long> sizes = plan.regionSizes();
        long[] group = new long[sizes.size()]; // a region's size, or for a region of a run the run's
        for (int i = 0; i < sizes.size(); i++) {
            group[i] = sizes.get(i);
        }
        for (RegionPlan.Slot slot : plan.slots()) {
            if (slot.regions() > 1) {
                long bytes = 0;
                for (int k = 0; k < slot.regions(); k++) {
                    bytes += sizes.get(slot.region() + k);
                }
                for (int k = 0; k < slot.regions(); k++) {
                    group[slot.region() + k] = bytes;
                }
            }
        }
        List<Integer> order = new ArrayList<>();
        for (int i = 0; i < sizes.size(); i++) {
            order.add(i);
        }
        order.sort(Comparator.comparingLong((Integer i) -> group[i]).reversed());
        return order;
    }

    /** Creates every region, in {@code order}, on the thread {@code engram-create}. */
    void start(List<Integer> order) {
        thread = new Thread(() -> {
            Throwable failed = null;
            for (int i : order) {
                if (failed == null && stopped) {
                    failed = new CancellationException("the load stopped before region " + i + " was created");
                }
                if (failed != null) {
                    regions.get(i).completeExceptionally(failed);
                    continue;
                }
                try {
                    regions.get(i).complete(create(i));
                } catch (RuntimeException | Error e) {
                    failed = e;
                    regions.get(i).completeExceptionally(e);
                }
            }
        }, "engram-create");
        thread.setDaemon(true);
        thread.start();
    }

    /** Makes region {@code i} in its place, hands it to {@code owned}, and counts the time it took. */
    private HostRegion create(int i) {
        long c0 = System.nanoTime();
        HostRegion r = owned.add(run[i] == null ? factory.create(i, sizes.get(i))
                : factory.createInRun(i, sizes.get(i), run[i], offset[i]));
        nanos += System.nanoTime() - c0;
        LOG.log(System.Logger.Level.DEBUG, () -> "region " + (i + 1) + " of " + sizes.size() + " created: "
                + Bytes.format(r.size()));
        return r;
    }

    /** Region {@code i}, once created (by the thread {@link #start} began). */
    CompletableFuture<HostRegion> region(int i) {
        return regions.get(i);
    }

    /**
     * Region {@code i}: once the thread has created it, or, not started, created now; a creation's error is rethrown
     * as it was thrown.
     */
    HostRegion next(int i) throws InterruptedException {
        if (thread == null) {
            HostRegion r = create(i);
            regions.get(i).complete(r);
            return r;
        }
        try {
            return regions.get(i).get();
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof RuntimeException re) {
                throw re;
            }
            if (c instanceof Error err) {
                throw err;
            }
            throw new IllegalStateException(c);
        }
    }

    /** The regions in index order, once each was asked for ({@link #next}). */
    List<HostRegion> created() {
        List<HostRegion> out = new ArrayList<>();
        regions.forEach(r -> out.add(r.join()));
        return out;
    }

    /** Where the table of {@code slot} starts, given its region {@code r} or, for a run, any region of it. */
    long tableAddress(RegionPlan.Slot slot, HostRegion r) {
        return slot.regions() > 1 ? run[slot.region()].address() + slot.offset() : r.address() + slot.offset();
    }

    /** Once every region was asked for: waits for the thread to end; the nanoseconds spent creating. */
    long finish() throws InterruptedException {
        if (thread != null) {
            thread.join();
        }
        return nanos;
    }

    /** Cancels the regions not begun and waits, uninterruptibly, for the creation under way to end. */
    void stop() {
        stopped = true;
        boolean interrupted = false;
        while (thread != null && thread.isAlive()) {
            try {
                thread.join();
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
