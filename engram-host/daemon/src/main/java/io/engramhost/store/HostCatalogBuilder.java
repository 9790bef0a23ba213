package io.engramhost.store;

import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.numa.CpuList;
import io.engramhost.numa.NumaNode;
import io.engramhost.numa.Placement;
import io.engramhost.numa.PlacementReport;
import io.engramhost.numa.Topology;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import io.engramhost.seed.SeedSettings;
import io.engramhost.seed.Seeder;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Loads the selected host tables into one backend's regions and, when asked, the device tensors into
 * GPU memory: plans the regions (large tensors alone, small ones packed), creates them one after another
 * (NUMA policy before the first touch) while the loader's threads read the checkpoint straight into each one
 * created and digest it as they read, then verifies placement and seals, in parallel. The memory budget is checked by the caller before the daemon takes its socket.
 *
 * <p>Every byte is read through the fds the checkpoint was validated from ({@link OpenCheckpoint}), and
 * once everything is read each file is checked unchanged (size, times, header, and the path still naming
 * it); a file that changed fails the load with one line, so what is served is what was validated.
 * The builder owns those fds and closes them when {@link #build} returns or throws.
 */
public final class HostCatalogBuilder implements CatalogBuilder {
    /** Tensors at least this large get a region of their own. */
    static final long OWN_REGION_BYTES = 64L << 20;
    /** Packed regions are closed at this size. */
    static final long PACK_LIMIT_BYTES = 1L << 30;
    /** What a load that found its checkpoint changed says after the file and the change. */
    static final String CHANGED_CONSEQUENCE = "refusing to serve it; restart the daemon once the file is stable";
    private static final System.Logger LOG = System.getLogger(HostCatalogBuilder.class.getName());

    private final OpenCheckpoint source;
    private final List<TensorInfo> tensors;
    private final Fingerprint fingerprint;
    private final RecordCheck records;
    private final HostRegionFactory factory;
    private final String backend;
    private final DeviceTensors deviceTensors;
    private final int threads;
    private final DaemonHooks hooks;
    private final RegionPlan plan;
    private final SeedSettings seed;

    HostCatalogBuilder(OpenCheckpoint source, List<TensorInfo> tensors, Fingerprint fingerprint, RecordCheck records,
            HostRegionFactory factory, String backend, DeviceTensors deviceTensors, int threads, DaemonHooks hooks,
            SeedSettings seed) {
        this.seed = seed;
        this.source = source;
        this.tensors = List.copyOf(tensors);
        this.fingerprint = fingerprint;
        this.records = records;
        this.factory = factory;
        this.backend = backend;
        this.deviceTensors = deviceTensors;
        this.threads = threads;
        this.hooks = hooks;
        if (factory.maxRegion() % ContentDigest.CHUNK != 0) {
            throw new IllegalArgumentException("the largest region must be a multiple of "
                    + Bytes.format(ContentDigest.CHUNK) + ", was " + factory.maxRegion());
        }
        if (factory.maxRegion() > 0) { // the runs' regions counted before the plan lists them: a huge (sparse) file's
            long regions = 0;          // table must not fill the heap; the exact count is checked after (CatalogFactory)
            for (TensorInfo t : this.tensors) {
                regions += t.length() > factory.maxRegion() ? (t.length() - 1) / factory.maxRegion() + 1 : 0;
            }
            Limits.checkRegions(regions);
        }
        this.plan = RegionPlan.plan(this.tensors.stream().map(TensorInfo::length).toList(), OWN_REGION_BYTES,
                PACK_LIMIT_BYTES, (int) Posix.pageSize(), factory.granule(), factory.maxRegion());
    }

    long plannedBytes() {
        return plan.totalBytes();
    }

    /** The staging a seed may use beside the regions ({@code --seed-staging}); 0 without seeding. */
    long stagingBytes() {
        return seed == null ? 0 : seed.stagingBytes();
    }

    /** The fds a client's manifest carries at most: the host regions and one GPU's device regions. */
    int regionCount() {
        return plan.regionSizes().size() + (deviceTensors == null ? 0 : deviceTensors.regionCount());
    }

    /** The loader the daemon uses: its progress goes to {@code progress}, and each piece read to {@code hooks}. */
    static CheckpointLoader loader(int threads, LoadProgress progress, DaemonHooks hooks) {
        return new CheckpointLoader(threads, CheckpointLoader.DEFAULT_PIECE, (done, all) -> {
            progress.done(done);
            hooks.reached(DaemonHooks.Point.LOAD_AFTER_CHUNK);
        });
    }

    /**
     * The host load's loader: when the regions go to one node (bound, or preferred), its threads run on that node's CPUs, so that
     * the pages they fill are touched from the node that holds them and the reads' copies stay local; STATUS shows
     * it ({@code load_threads}). With no such node, or CPUs this process may not use, the threads run anywhere.
     */
    private CheckpointLoader loaderOnNode(int threads, LoadProgress progress) {
        CheckpointLoader loader = loader(threads, progress, hooks);
        int node = factory.loadNode();
        Optional<NumaNode> n = node < 0 ? Optional.empty()
                : Topology.read().node(node);
        if (n.isEmpty() || n.get().cpus().isEmpty()) {
            progress.report(r -> r.withLoadThreads(new LoadReport.LoadThreads(threads, null, "any", null)));
            return loader;
        }
        List<Integer> cpus = n.get().cpus();
        progress.report(r -> r.withLoadThreads(new LoadReport.LoadThreads(threads, node, CpuList.format(cpus), null)));
        AtomicBoolean warned = new AtomicBoolean();
        return loader.withThreadStart(() -> {
            try {
                Posix.setThreadAffinity(cpus);
            } catch (RuntimeException e) { // a CPU set this process may not use (a cpuset cgroup): run anywhere
                if (warned.compareAndSet(false, true)) {
                    LOG.log(System.Logger.Level.WARNING, "the load threads run on any CPU, not node " + node + "'s ("
                            + e.getMessage() + ")");
                    progress.report(r -> r.withLoadThreads(new LoadReport.LoadThreads(threads, node, "any",
                            String.valueOf(e.getMessage()))));
                }
            }
        });
    }

    @Override
    public void close() {
        source.close();
    }

    @Override
    public Catalog build(LoadProgress progress) throws Exception {
        Closer<AutoCloseable> owned = new Closer<>();
        RegionCreator creator = null;
        try {
            long total = tensors.stream().mapToLong(TensorInfo::length).sum();
            List<Long> sizes = plan.regionSizes();
            progress.phase(LoadProgress.READ, "creating " + sizes.size() + " " + backend + " regions and loading "
                    + tensors.size() + " tensors into them with " + threads + " threads", total);
            List<HostRegion> regions = new ArrayList<>();
            Map<TensorInfo, Long> address = new LinkedHashMap<>();
            Runs runs = reserveRuns(owned);
            long createNanos = 0;
            Map<TensorInfo, Long> seeded = Map.of();
            List<TensorInfo> treeCheck = new ArrayList<>();
            if (seed != null) {
                // the regions are created one after another on a thread of their own, and the peers fill each one as
                // soon as it exists; then the disk reads what they did not give, region by region as below
                creator = new RegionCreator(runs::create, sizes, creationOrder(), owned);
                seeded = seedFromPeers(creator, runs, progress, treeCheck);
                long rest = total - seeded.keySet().stream().mapToLong(TensorInfo::length).sum();
                progress.phase(LoadProgress.READ, "loading " + (tensors.size() - seeded.size()) + " tensors from the"
                        + " checkpoint with " + threads + " threads", rest);
            }
            Map<TensorInfo, Long> fromPeers = seeded;
            long readTotal = total - seeded.keySet().stream().mapToLong(TensorInfo::length).sum();
            CheckpointLoader.Result read;
            try (CheckpointLoader.Session session = loaderOnNode(threads, progress).start(source, readTotal)) {
                hooks.reached(DaemonHooks.Point.LOAD_BEFORE_READ);
                List<List<Integer>> byRegion = new ArrayList<>();
                sizes.forEach(size -> byRegion.add(new ArrayList<>()));
                List<TensorInfo> empty = new ArrayList<>();
                for (int i = 0; i < tensors.size(); i++) {
                    RegionPlan.Slot slot = plan.slots().get(i);
                    if (slot.region() < 0) {
                        empty.add(tensors.get(i));
                    }
                    for (int k = 0; k < slot.regions(); k++) { // a table over a run is read as each region comes
                        byRegion.get(slot.region() + k).add(i);
                    }
                }
                session.add(empty, t -> 0);
                // One region at a time: the driver serialises cuMemCreate (more threads or smaller handles made no
                // difference on the H200: docs/benchmarks.md), so the reads of each region overlap the next creation.
                for (int i = 0; i < sizes.size(); i++) {
                    HostRegion region;
                    if (creator != null) {
                        region = creator.await(i);
                        regions.add(region);
                    } else {
                        long c0 = System.nanoTime();
                        region = owned.add(runs.create(i));
                        createNanos += System.nanoTime() - c0;
                        regions.add(region);
                    }
                    int index = i;
                    LOG.log(System.Logger.Level.DEBUG, () -> "region " + (index + 1) + " of " + sizes.size()
                            + " created: " + Bytes.format(region.size()));
                    List<TensorInfo> in = new ArrayList<>();
                    for (int t : byRegion.get(i)) {
                        TensorInfo tensor = tensors.get(t);
                        RegionPlan.Slot slot = plan.slots().get(t);
                        if (slot.regions() <= 1) {
                            address.put(tensor, region.address() + slot.offset());
                            if (!fromPeers.containsKey(tensor)) {
                                in.add(tensor);
                            }
                            continue;
                        }
                        long at = runs.tableAddress(slot, region);
                        address.put(tensor, at);
                        long from = (i - slot.region()) * factory.maxRegion();
                        if (!fromPeers.containsKey(tensor)) {
                            session.addPart(tensor, at, from, Math.min(tensor.length(), from + factory.maxRegion()));
                        }
                    }
                    session.add(in, address::get);
                }
                read = session.finish();
            }
            if (creator != null) {
                createNanos = creator.finish();
            }
            for (TensorInfo t : tensors) { // the digest records, against the digests the read (or a peer's bytes) gave
                records.check(t, digestOf(t, read, fromPeers));
            }
            checkTrees(treeCheck, address);
            long t2 = System.nanoTime();
            progress.phase(LoadProgress.VERIFY, "verifying placement and sealing", 0);
            int[] regionNode = verifyPlacementAndSeal(regions, progress);
            sameNodeInRuns(regionNode);
            long t3 = System.nanoTime();
            LoadTimings timings = new LoadTimings(createNanos, plan.totalBytes(), Math.round(read.readSeconds() * 1e9),
                    readTotal, read.directBytes(), t3 - t2);
            progress.loadTimings(timings);
            LOG.log(System.Logger.Level.INFO, timings.describe()
                    + (read.directRefused() != null ? "; O_DIRECT refused, read through the page cache: "
                            + read.directRefused() : ""));

            ManifestAssembler manifests = new ManifestAssembler(fingerprint);
            for (int i = 0; i < regions.size(); i++) {
                manifests.hostRegion(new Manifest.Region(factory.kind(), regions.get(i).size(), regionNode[i], -1),
                        regions.get(i).fd());
            }
            for (int i = 0; i < tensors.size(); i++) {
                TensorInfo t = tensors.get(i);
                RegionPlan.Slot s = plan.slots().get(i);
                manifests.hostTable(new Manifest.Table(t.name(), t.dtype().name(), t.shape(), t.length(), s.region(),
                        s.offset(), digestOf(t, read, fromPeers), factory.kind(), s.region() < 0 ? -1 : regionNode[s.region()], -1));
            }
            if (deviceTensors != null) {
                deviceTensors.load(source, manifests, owned, progress, threads, hooks);
            }
            progress.phase(LoadProgress.CHECK, "checking the checkpoint is unchanged", 0);
            source.checkUnchanged("during the load", CHANGED_CONSEQUENCE);
            Map<Integer, Catalog.Served> served = manifests.build();
            return new Catalog(served, fingerprint.sha256Hex(),
                    new FingerprintMatch(fingerprint, served.get(-1).manifest().fingerprint()), backend, owned);
        } catch (Exception e) {
            if (creator != null) {
                creator.stop(); // no region is created, nor handed to anyone, once the owner closes them
            }
            owned.closeAfter(e);
            throw e;
        } finally {
            source.close();
        }
    }

    /**
     * Creates the host regions in the given order on a thread of its own ({@code engram-create}), each handed out
     * ({@link #region}) the moment it exists, so that seeding fills the first regions while the next are created.
     * Each region goes to the build's {@code owned} as it is created: that is its one owner, and closes it when the
     * build fails; the creator never closes one. A creation that fails fails every region after it in that order,
     * with its error; {@link #stop} cancels the ones not begun and waits for the one under way.
     */
    private static final class RegionCreator {
        /** Makes region {@code i}. */
        interface Maker {
            HostRegion create(int i);
        }

        private final List<CompletableFuture<HostRegion>> regions = new ArrayList<>();
        private final Thread thread;
        private volatile boolean stopped;
        /** Written by the thread, read after it has ended. */
        private long nanos;

        RegionCreator(Maker factory, List<Long> sizes, List<Integer> order, Closer<AutoCloseable> owned) {
            sizes.forEach(size -> regions.add(new CompletableFuture<>()));
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
                        long c0 = System.nanoTime();
                        HostRegion r = owned.add(factory.create(i));
                        nanos += System.nanoTime() - c0;
                        int index = i;
                        LOG.log(System.Logger.Level.DEBUG, () -> "region " + (index + 1) + " of " + sizes.size()
                                + " created: " + Bytes.format(r.size()));
                        regions.get(i).complete(r);
                    } catch (RuntimeException | Error e) {
                        failed = e;
                        regions.get(i).completeExceptionally(e);
                    }
                }
            }, "engram-create");
            thread.setDaemon(true);
            thread.start();
        }

        /** Region {@code i}, once created. */
        CompletableFuture<HostRegion> region(int i) {
            return regions.get(i);
        }

        /** Waits for region {@code i}; its creation's error is rethrown as it was thrown. */
        HostRegion await(int i) throws InterruptedException {
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

        /** Waits for the thread to end (every region awaited already); the nanoseconds spent creating. */
        long finish() throws InterruptedException {
            thread.join();
            return nanos;
        }

        /** Cancels the regions not begun and waits, uninterruptibly, for the creation under way to end. */
        void stop() {
            stopped = true;
            boolean interrupted = false;
            while (thread.isAlive()) {
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

    /**
     * The record's sha256-tree-v1 of each table the disk filled after a peer's bytes had the record's engram digest
     * v1 but not its tree digest: the disk decides between the peer and the record. When the disk's bytes have the
     * record's tree digest the peer lied (and was dropped); when they do not, the record disagrees with the
     * checkpoint's own bytes, and the load refuses to serve the table as it does for an engram digest v1 difference.
     */
    private void checkTrees(List<TensorInfo> disk, Map<TensorInfo, Long> address) {
        if (disk.isEmpty()) {
            return;
        }
        List<TreeDigest.Source> sources = new ArrayList<>();
        disk.forEach(t -> sources.add(new TreeDigest.Memory(address.get(t), t.length())));
        List<byte[]> trees = TreeDigest.digestAll(sources, threads);
        for (int i = 0; i < disk.size(); i++) {
            records.checkTree(disk.get(i), trees.get(i), "checked because a peer sent this table with the record's"
                    + " engram digest v1 but another " + TreeDigest.ALGORITHM);
            LOG.log(System.Logger.Level.WARNING, "seed: table '" + disk.get(i).name() + "' read from the disk has the"
                    + " record's " + TreeDigest.ALGORITHM + ": the bytes that peer sent were not the checkpoint's,"
                    + " though made to have its engram digest v1");
        }
    }

    private static long digestOf(TensorInfo t, CheckpointLoader.Result read, Map<TensorInfo, Long> seeded) {
        Long d = seeded.get(t);
        return d != null ? d : read.digest(t);
    }

    /**
     * Fills from the peers every non-empty table that has a digest to be checked against (docs/seeding.md): the
     * tables whose bytes arrived with the record's digest, and that digest. STATUS's origin gets each source's share.
     */
    private Map<TensorInfo, Long> seedFromPeers(RegionCreator creator, Runs runs, LoadProgress progress,
            List<TensorInfo> treeCheck) throws InterruptedException {
        List<TensorInfo> candidates = new ArrayList<>();
        List<Seeder.Table> wanted = new ArrayList<>();
        int uncovered = 0;
        int[] created = new int[plan.regionSizes().size()]; // each region's place in the creation order
        List<Integer> creation = creationOrder();
        for (int k = 0; k < creation.size(); k++) {
            created[creation.get(k)] = k;
        }
        boolean[] stageable = stageable(creation);
        List<Integer> order = new ArrayList<>(); // the tensors in the order their regions are created
        for (int i = 0; i < tensors.size(); i++) {
            if (plan.slots().get(i).region() >= 0) {
                order.add(i);
            }
        }
        order.sort(Comparator.comparingInt((Integer i) -> created[plan.slots().get(i).region()])
                .thenComparingLong(i -> plan.slots().get(i).offset()));
        for (int i : order) {
            TensorInfo t = tensors.get(i);
            RegionPlan.Slot slot = plan.slots().get(i);
            Long d = records.expectedDigest(t);
            if (t.length() == 0) {
                continue;
            }
            if (d == null) {
                uncovered++;
                continue;
            }
            candidates.add(t);
            long maxRegion = factory.maxRegion();
            wanted.add(new Seeder.Table(t.name(), t.length(), d, records.expectedTree(t),
                    chunk -> new Seeder.AddressOf<>(creator.region(slot.regionAt(chunk * ContentDigest.CHUNK,
                            maxRegion)), r -> runs.tableAddress(slot, r) + chunk * ContentDigest.CHUNK),
                    stageable[slot.region()]));
        }
        if (uncovered > 0) {
            LOG.log(System.Logger.Level.WARNING, "seed: " + uncovered + " of the " + tensors.size() + " tables have"
                    + " no digest in a record and are read from the disk");
        }
        long bytes = candidates.stream().mapToLong(TensorInfo::length).sum();
        progress.phase(LoadProgress.SEED, "seeding " + candidates.size() + " tensors from " + seed.peers().size()
                + (seed.peers().size() == 1 ? " peer" : " peers") + " as their regions are created", bytes);
        long t0 = System.nanoTime();
        Seeder.Result r = new Seeder(seed, threads, line -> LOG.log(System.Logger.Level.WARNING, line),
                progress::advance).seed(wanted);
        double seconds = (System.nanoTime() - t0) / 1e9;
        Map<TensorInfo, Long> out = new LinkedHashMap<>();
        r.digests().forEach((i, d) -> out.put(candidates.get(i), d));
        for (int i : r.notSeeded()) {
            if (r.treeRefused().contains(i)) {
                treeCheck.add(candidates.get(i));
            }
        }
        long got = out.keySet().stream().mapToLong(TensorInfo::length).sum();
        List<LoadReport.SeedSource> sources = new ArrayList<>();
        for (Seeder.Source s : r.sources()) {
            sources.add(new LoadReport.SeedSource(s.peer(), s.bytes(), s.seconds()));
        }
        LoadReport.Seeded fact = new LoadReport.Seeded(sources, got, seconds, r.peersRefused(), r.stagedBytes());
        progress.report(rep -> rep.withSeeded(fact));
        LOG.log(System.Logger.Level.INFO, "seed: " + (r.stopped() ? "stopped, a region not created, after " : "")
                + out.size() + " of " + candidates.size() + " tables ("
                + Bytes.format(got) + ") from " + r.sources().size() + (r.sources().size() == 1 ? " peer" : " peers")
                + " in " + String.format("%.2f s (%s)", seconds, Bytes.gibPerSecond(got, seconds))
                + (r.notSeeded().isEmpty() || r.stopped() ? "" : "; " + r.notSeeded().size() + " from the disk")
                + (r.stagingBuffers() == 0 ? "" : "; " + Bytes.format(r.stagedBytes()) + " of it held in "
                        + r.stagingBuffers() + " staging buffers of 64 MiB until its region existed"));
        return out;
    }

    /**
     * The order a seeded load creates its regions in: the largest first (ties in the plan's order). A region is
     * filled only once it exists, so the seed ends at best one fill of the last large region after the creation
     * ends; the small ones, created last, are filled while that fill runs (bench/seed-runs.md, "Runs 37-39").
     */
    private List<Integer> creationOrder() {
        List<Long> sizes = plan.regionSizes();
        long[] group = new long[sizes.size()]; // a region's size, or for a region of a run the run's: a run stays whole
        for (int i = 0; i < sizes.size(); i++) {
            group[i] = sizes.get(i);
        }
        for (RegionPlan.Slot slot : plan.slots()) {
            if (slot.regions() > 1) {
                long run = 0;
                for (int k = 0; k < slot.regions(); k++) {
                    run += sizes.get(slot.region() + k);
                }
                for (int k = 0; k < slot.regions(); k++) {
                    group[slot.region() + k] = run;
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

    /**
     * The address ranges of the plan's runs (a table larger than the factory's largest region lies in several, back to
     * back), reserved before any region is made and owned by the build's {@code owned}, which closes them after the
     * regions it holds (it closes in the reverse order of adding).
     */
    private Runs reserveRuns(Closer<AutoCloseable> owned) {
        List<Long> sizes = plan.regionSizes();
        HostRegionFactory.Run[] run = new HostRegionFactory.Run[sizes.size()];
        long[] offset = new long[sizes.size()];
        for (int t = 0; t < tensors.size(); t++) {
            RegionPlan.Slot slot = plan.slots().get(t);
            if (slot.regions() <= 1) {
                continue;
            }
            long bytes = 0;
            for (int k = 0; k < slot.regions(); k++) {
                offset[slot.region() + k] = bytes;
                bytes += sizes.get(slot.region() + k);
            }
            HostRegionFactory.Run r = owned.add(factory.reserveRun(bytes, "table " + tensors.get(t).name()));
            for (int k = 0; k < slot.regions(); k++) {
                run[slot.region() + k] = r;
            }
        }
        return new Runs(factory, sizes, run, offset);
    }

    /** Each region's run (null: a region alone) and its offset in it; makes the regions in their places. */
    private record Runs(HostRegionFactory factory, List<Long> sizes, HostRegionFactory.Run[] run, long[] offset) {
        HostRegion create(int i) {
            return run[i] == null ? factory.create(i, sizes.get(i))
                    : factory.createInRun(i, sizes.get(i), run[i], offset[i]);
        }

        /** Where the table of {@code slot} starts, given its region {@code r} or, for a run, any region of it. */
        long tableAddress(RegionPlan.Slot slot, HostRegion r) {
            return slot.regions() > 1 ? run[slot.region()].address() + slot.offset() : r.address() + slot.offset();
        }
    }

    /**
     * A table over a run has one node in the manifest, and a client checks every region of the run against it: where
     * the placement check found the run's regions on different nodes (HOST_NUMA memory is made on one), the run's
     * regions and table say -1, unknown, with a warning.
     */
    private void sameNodeInRuns(int[] regionNode) {
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

    /**
     * Which regions a seed may stage the ranges of ({@code --seed-staging}), by region index, given the creation
     * {@code order}: the first region created, and a region larger than all the regions created after it. The first: while it is created nothing else can be
     * asked for, and on a link slower than the creation that time would be lost to the link for good. The others:
     * a region that as many bytes follow has its fill run while those are created, as without staging, and staging
     * it would only copy its bytes once more beside their creation; the last region, and one larger than all that
     * follow, gain (bench/seed-runs.md, "Staging").
     */
    private boolean[] stageable(List<Integer> order) {
        List<Long> sizes = plan.regionSizes();
        boolean[] out = new boolean[sizes.size()];
        long after = 0; // the bytes of the regions created after the one at k
        for (int k = order.size() - 1; k >= 0; k--) {
            long size = sizes.get(order.get(k));
            out[order.get(k)] = k == 0 || after < size;
            after += size;
        }
        return out;
    }

    /** Pieces the placement check works in, spread over the load's threads. */
    private static final long VERIFY_PIECE = 1L << 30;

    /**
     * Each region's node (the one most of its pages are on, verified with move_pages where the kernel allows), then
     * every region sealed; both spread over the load's threads (move_pages over tens of millions of 4 KiB pages, and
     * unmapping the writable views, take seconds on one thread).
     */
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
