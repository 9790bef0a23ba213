package io.engramhost.store;

import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.numa.Placement;
import io.engramhost.numa.PlacementReport;
import io.engramhost.protocol.Manifest;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Loads the selected host tables into one backend's regions and, when asked, the device tensors into
 * GPU memory: plans the regions (large tensors alone, small ones packed), creates them (NUMA policy
 * before the first touch), reads the checkpoint straight into them, digests, verifies placement and
 * seals. The memory budget is checked by the caller before the daemon takes its socket.
 */
public final class HostCatalogBuilder implements CatalogBuilder {
    /** Tensors at least this large get a region of their own. */
    static final long OWN_REGION_BYTES = 64L << 20;
    /** Packed regions are closed at this size. */
    static final long PACK_LIMIT_BYTES = 1L << 30;

    private final List<TensorInfo> tensors;
    private final Fingerprint fingerprint;
    private final HostRegionFactory factory;
    private final String backend;
    private final DeviceTensors deviceTensors;
    private final int threads;
    private final RegionPlan plan;

    HostCatalogBuilder(List<TensorInfo> tensors, Fingerprint fingerprint, HostRegionFactory factory, String backend,
            DeviceTensors deviceTensors, int threads) {
        this.tensors = List.copyOf(tensors);
        this.fingerprint = fingerprint;
        this.factory = factory;
        this.backend = backend;
        this.deviceTensors = deviceTensors;
        this.threads = threads;
        this.plan = RegionPlan.plan(this.tensors.stream().map(TensorInfo::length).toList(), OWN_REGION_BYTES,
                PACK_LIMIT_BYTES, 4096, factory.granule());
    }

    long plannedBytes() {
        return plan.totalBytes();
    }

    @Override
    public Catalog build(LoadProgress progress) throws Exception {
        Regions<AutoCloseable> owned = new Regions<>();
        try {
            long total = tensors.stream().mapToLong(TensorInfo::length).sum();
            progress.phase("creating " + plan.regionSizes().size() + " " + backend + " regions", plan.totalBytes());
            long t0 = System.nanoTime();
            List<HostRegion> regions = new java.util.ArrayList<>();
            for (int i = 0; i < plan.regionSizes().size(); i++) {
                regions.add(owned.add(factory.create(i, plan.regionSizes().get(i))));
            }
            long t1 = System.nanoTime();
            progress.phase("loading " + tensors.size() + " tensors with " + threads + " threads", total);
            Map<TensorInfo, Long> address = new LinkedHashMap<>();
            for (int i = 0; i < tensors.size(); i++) {
                RegionPlan.Slot slot = plan.slots().get(i);
                address.put(tensors.get(i), slot.region() < 0 ? 0L : regions.get(slot.region()).address() + slot.offset());
            }
            new CheckpointLoader(threads, CheckpointLoader.DEFAULT_CHUNK, (done, all) -> progress.done(done))
                    .load(tensors, address::get);
            long t2 = System.nanoTime();
            progress.phase("digesting", total);
            long[] digests = new long[tensors.size()];
            for (int i = 0; i < tensors.size(); i++) {
                TensorInfo t = tensors.get(i);
                digests[i] = ContentDigest.digestParallel(address.get(t), t.length(), threads);
                progress.advance(t.length());
            }
            long t3 = System.nanoTime();
            progress.phase("verifying placement", 0);
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
                deviceTensors.load(manifests, owned, progress, threads);
            }
            return new Catalog(manifests.build(), fingerprint.sha256Hex(), new FingerprintMatch(fingerprint), backend,
                    owned);
        } catch (Exception e) {
            owned.close();
            throw e;
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
                        > 4096 && factory.kind().memfd() ? factory.granule() : 4096);
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
