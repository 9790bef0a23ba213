package io.engramhost.store;

import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.numa.Placement;
import io.engramhost.numa.PlacementReport;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Loads the selected host tables into one backend's regions and, when asked, the device tensors into
 * GPU memory: plans the regions (large tensors alone, small ones packed), creates them (NUMA policy
 * before the first touch), reads the checkpoint straight into them, digests, verifies placement and
 * seals. The memory budget is checked by the caller before the daemon takes its socket.
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
    /**
     * TEST ONLY: {@code before-read:PATH} holds the load before its first read, {@code after-chunk:PATH} after
     * each chunk read (so after the first), until PATH exists; the daemon says so once on stderr. Tests use
     * it to change a checkpoint at a known point of a load; nothing else should set it.
     */
    public static final String TEST_LOAD_GATE = "ENGRAM_HOST_TEST_LOAD_GATE";
    /** What a load that found its checkpoint changed says after the file and the change. */
    static final String CHANGED_CONSEQUENCE = "refusing to serve it; restart the daemon once the file is stable";
    private static final System.Logger LOG = System.getLogger(HostCatalogBuilder.class.getName());

    private final OpenCheckpoint source;
    private final List<TensorInfo> tensors;
    private final Fingerprint fingerprint;
    private final HostRegionFactory factory;
    private final String backend;
    private final DeviceTensors deviceTensors;
    private final int threads;
    private final RegionPlan plan;

    HostCatalogBuilder(OpenCheckpoint source, List<TensorInfo> tensors, Fingerprint fingerprint,
            HostRegionFactory factory, String backend, DeviceTensors deviceTensors, int threads) {
        this.source = source;
        this.tensors = List.copyOf(tensors);
        this.fingerprint = fingerprint;
        this.factory = factory;
        this.backend = backend;
        this.deviceTensors = deviceTensors;
        this.threads = threads;
        this.plan = RegionPlan.plan(this.tensors.stream().map(TensorInfo::length).toList(), OWN_REGION_BYTES,
                PACK_LIMIT_BYTES, (int) Posix.pageSize(), factory.granule());
    }

    long plannedBytes() {
        return plan.totalBytes();
    }

    /** The fds a client's manifest carries at most: the host regions and one GPU's device regions. */
    int regionCount() {
        return plan.regionSizes().size() + (deviceTensors == null ? 0 : deviceTensors.regionCount());
    }

    /** The loader the daemon uses, held at each chunk while a test gate says so ({@link #TEST_LOAD_GATE}). */
    static CheckpointLoader loader(int threads, LoadProgress progress) {
        CheckpointLoader loader = new CheckpointLoader(threads, CheckpointLoader.DEFAULT_CHUNK,
                (done, all) -> progress.done(done));
        return testGate("after-chunk") ? loader.withAfterChunkHook(HostCatalogBuilder::holdAtTestGate) : loader;
    }

    /**
     * The host load's loader: when the regions go to one node (bound, or preferred), its threads run on that node's CPUs, so that
     * the pages they fill are touched from the node that holds them and the reads' copies stay local; STATUS shows
     * it ({@code load_threads}). With no such node, or CPUs this process may not use, the threads run anywhere.
     */
    private CheckpointLoader loaderOnNode(int threads, LoadProgress progress) {
        CheckpointLoader loader = loader(threads, progress);
        int node = factory.loadNode();
        java.util.Optional<io.engramhost.numa.NumaNode> n = node < 0 ? java.util.Optional.empty()
                : io.engramhost.numa.Topology.read().node(node);
        if (n.isEmpty() || n.get().cpus().isEmpty()) {
            progress.put("load_threads", Map.of("threads", threads, "cpus", "any"));
            return loader;
        }
        List<Integer> cpus = n.get().cpus();
        progress.put("load_threads", Map.of("threads", threads, "node", node, "cpus",
                io.engramhost.numa.CpuList.format(cpus)));
        java.util.concurrent.atomic.AtomicBoolean warned = new java.util.concurrent.atomic.AtomicBoolean();
        return loader.withThreadStart(() -> {
            try {
                Posix.setThreadAffinity(cpus);
            } catch (RuntimeException e) { // a CPU set this process may not use (a cpuset cgroup): run anywhere
                if (warned.compareAndSet(false, true)) {
                    LOG.log(System.Logger.Level.WARNING, "the load threads run on any CPU, not node " + node + "'s ("
                            + e.getMessage() + ")");
                    progress.put("load_threads", Map.of("threads", threads, "node", node, "cpus", "any",
                            "why", String.valueOf(e.getMessage())));
                }
            }
        });
    }

    private static boolean testGate(String when) {
        return TestGate.names(TEST_LOAD_GATE, when);
    }

    /** TEST ONLY: waits until the gate's path exists ({@link #TEST_LOAD_GATE}). */
    private static void holdAtTestGate() {
        String gate = System.getenv(TEST_LOAD_GATE);
        if (!TestGate.hold(TEST_LOAD_GATE, gate.substring(0, gate.indexOf(':')), "load")) {
            throw new CheckpointException("load interrupted while held by " + TEST_LOAD_GATE);
        }
    }

    @Override
    public Catalog build(LoadProgress progress) throws Exception {
        Closer<AutoCloseable> owned = new Closer<>();
        try {
            long total = tensors.stream().mapToLong(TensorInfo::length).sum();
            progress.phase(LoadProgress.CREATE, "creating " + plan.regionSizes().size() + " " + backend + " regions",
                    plan.totalBytes());
            long t0 = System.nanoTime();
            List<HostRegion> regions = new java.util.ArrayList<>();
            for (int i = 0; i < plan.regionSizes().size(); i++) {
                long size = plan.regionSizes().get(i);
                regions.add(owned.add(factory.create(i, size)));
                progress.advance(size); // per region: cuda-vmm takes seconds for tens of GiB
                LOG.log(System.Logger.Level.DEBUG, () -> "region " + regions.size() + " of " + plan.regionSizes().size()
                        + " created: " + Bytes.format(size));
            }
            long t1 = System.nanoTime();
            progress.phase(LoadProgress.READ, "loading " + tensors.size() + " tensors with " + threads + " threads", total);
            Map<TensorInfo, Long> address = new LinkedHashMap<>();
            for (int i = 0; i < tensors.size(); i++) {
                RegionPlan.Slot slot = plan.slots().get(i);
                address.put(tensors.get(i), slot.region() < 0 ? 0L : regions.get(slot.region()).address() + slot.offset());
            }
            if (testGate("before-read")) {
                holdAtTestGate();
            }
            loaderOnNode(threads, progress).load(source, tensors, address::get);
            long t2 = System.nanoTime();
            progress.phase(LoadProgress.DIGEST, "digesting", total);
            long[] digests = digests(tensors, address, threads, progress);
            long t3 = System.nanoTime();
            progress.phase(LoadProgress.VERIFY, "verifying placement", 0);
            int[] regionNode = verifyPlacement(regions, progress);
            regions.forEach(HostRegion::seal);
            long t4 = System.nanoTime();
            progress.loadTimings(new LoadTimings(t1 - t0, t2 - t1, total, t3 - t2, t4 - t3));

            ManifestAssembler manifests = new ManifestAssembler(fingerprint);
            for (int i = 0; i < regions.size(); i++) {
                manifests.hostRegion(new Manifest.Region(factory.kind(), regions.get(i).size(), regionNode[i], -1),
                        regions.get(i).fd());
            }
            for (int i = 0; i < tensors.size(); i++) {
                TensorInfo t = tensors.get(i);
                RegionPlan.Slot s = plan.slots().get(i);
                manifests.hostTable(new Manifest.Table(t.name(), t.dtype().name(), t.shape(), t.length(), s.region(),
                        s.offset(), digests[i], factory.kind(), s.region() < 0 ? -1 : regionNode[s.region()], -1));
            }
            if (deviceTensors != null) {
                deviceTensors.load(source, manifests, owned, progress, threads);
            }
            progress.phase(LoadProgress.CHECK, "checking the checkpoint is unchanged", 0);
            source.checkUnchanged("during the load", CHANGED_CONSEQUENCE);
            return new Catalog(manifests.build(), fingerprint.sha256Hex(), new FingerprintMatch(fingerprint), backend,
                    owned);
        } catch (Exception e) {
            owned.closeAfter(e);
            throw e;
        } finally {
            source.close();
        }
    }

    /**
     * engram digest v1 of every tensor on one pool of {@code threads} threads: a tensor of more than one
     * chunk has its chunks spread over the pool, smaller ones are one task each (a pool per tensor would
     * cost more than the hashing for thousands of small tables).
     */
    static long[] digests(List<TensorInfo> tensors, Map<TensorInfo, Long> address, int threads, LoadProgress progress) {
        long[] out = new long[tensors.size()];
        ExecutorService pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "engram-digest");
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<Long>> small = new ArrayList<>(java.util.Collections.nCopies(tensors.size(), null));
            for (int i = 0; i < tensors.size(); i++) {
                TensorInfo t = tensors.get(i);
                long at = address.get(t);
                if (t.length() > ContentDigest.CHUNK) {
                    out[i] = ContentDigest.digestParallel(at, t.length(), pool);
                    progress.advance(t.length());
                } else {
                    small.set(i, pool.submit(() -> {
                        long d = ContentDigest.digest(at, t.length());
                        progress.advance(t.length());
                        return d;
                    }));
                }
            }
            for (int i = 0; i < tensors.size(); i++) {
                if (small.get(i) != null) {
                    out[i] = small.get(i).get();
                }
            }
            return out;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while digesting", e);
        } catch (ExecutionException e) {
            throw new IllegalStateException("digesting failed: " + e.getCause(), e.getCause());
        } finally {
            pool.shutdownNow();
        }
    }

    /** Each region's node: the one most of its pages are on, verified with move_pages where the kernel allows. */
    private int[] verifyPlacement(List<HostRegion> regions, LoadProgress progress) {
        int[] node = new int[regions.size()];
        Map<String, Object> placement = new LinkedHashMap<>();
        Map<Integer, Long> pagesByNode = new TreeMap<>();
        String unverified = null;
        for (int i = 0; i < regions.size(); i++) {
            node[i] = factory.node();
            try {
                PlacementReport r = Placement.verify(regions.get(i).address(), regions.get(i).size(), factory.granule()
                        > Posix.pageSize() && factory.kind().memfd() ? factory.granule() : Posix.pageSize());
                r.pagesByNode().forEach((n, c) -> pagesByNode.merge(n, c, Long::sum));
                node[i] = r.pagesByNode().entrySet().stream().max(Map.Entry.comparingByValue()).map(Map.Entry::getKey)
                        .orElse(node[i]);
            } catch (RuntimeException e) {
                unverified = e.getMessage();
            }
        }
        pagesByNode.forEach((n, c) -> placement.put("node" + n + "_pages", c));
        if (unverified != null) {
            placement.put("unverified", unverified);
        }
        progress.put("placement", placement);
        return node;
    }
}
