package io.engramhost.store;

import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.daemon.Catalog;
import io.engramhost.daemon.CatalogBuilder;
import io.engramhost.daemon.LoadProgress;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.memfd.RegionPlan;
import io.engramhost.numa.MemoryBudget;
import io.engramhost.numa.Numa;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.numa.Placement;
import io.engramhost.numa.PlacementReport;
import io.engramhost.numa.Topology;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Loads the selected tensors into sealed memfds: plans the regions (large tensors alone, small ones
 * packed), checks the memory fits, creates each memfd with the NUMA policy set before the first
 * touch, reads the checkpoint straight into them, digests, verifies placement, then seals.
 */
public final class MemfdCatalogBuilder implements CatalogBuilder {
    /** Tensors at least this large get a memfd of their own. */
    static final long OWN_REGION_BYTES = 64L << 20;
    /** Packed memfds are closed at this size. */
    static final long PACK_LIMIT_BYTES = 1L << 30;

    private final List<TensorInfo> tensors;
    private final Fingerprint fingerprint;
    private final PageKind pages;
    private final NumaPolicy policy;
    private final Topology topology;
    private final int threads;
    private final RegionPlan plan;

    public MemfdCatalogBuilder(List<TensorInfo> tensors, Fingerprint fingerprint, PageKind pages, NumaPolicy policy,
            Topology topology, int threads) {
        this.tensors = List.copyOf(tensors);
        this.fingerprint = fingerprint;
        this.pages = pages;
        this.policy = policy;
        this.topology = topology;
        this.threads = threads;
        this.plan = RegionPlan.plan(this.tensors.stream().map(TensorInfo::length).toList(), OWN_REGION_BYTES,
                PACK_LIMIT_BYTES, 4096, pages);
    }

    /**
     * Checks, before anything is allocated, that the planned memfds fit in free memory (or free huge
     * pages) where the policy puts them; throws with both numbers when they do not.
     */
    public String checkBudget() {
        return plan.totalBytes() == 0 ? "nothing to load"
                : MemoryBudget.check(plan.totalBytes(), policy, pages.hugetlb(), pages.pageSize(), topology);
    }

    @Override
    public Catalog build(LoadProgress progress) throws Exception {
        List<Long> lengths = tensors.stream().map(TensorInfo::length).toList();
        Regions<MemfdRegion> regions = new Regions<>();
        try {
            progress.phase("creating " + plan.regionSizes().size() + " memfds (" + pages + ", numa " + policy + ")",
                    plan.totalBytes());
            long t0 = System.nanoTime();
            for (int i = 0; i < plan.regionSizes().size(); i++) {
                regions.add(MemfdRegion.create("engram." + i, plan.regionSizes().get(i), pages,
                        policy == NumaPolicy.none() ? null : m -> Numa.apply(m, policy)));
            }
            long t1 = System.nanoTime();
            long total = lengths.stream().mapToLong(Long::longValue).sum();
            progress.phase("loading " + tensors.size() + " tensors with " + threads + " threads", total);
            Map<TensorInfo, Long> address = new LinkedHashMap<>();
            for (int i = 0; i < tensors.size(); i++) {
                RegionPlan.Slot slot = plan.slots().get(i);
                address.put(tensors.get(i), slot.region() < 0 ? 0L
                        : regions.items().get(slot.region()).writable().address() + slot.offset());
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
            Map<Integer, Long> pagesByNode = new TreeMap<>();
            int[] regionNode = new int[regions.items().size()];
            for (int i = 0; i < regionNode.length; i++) {
                PlacementReport r = Placement.verify(regions.items().get(i).writable(), pages.pageSize());
                r.pagesByNode().forEach((n, c) -> pagesByNode.merge(n, c, Long::sum));
                regionNode[i] = dominantNode(r);
            }
            regions.items().forEach(MemfdRegion::seal);
            long t4 = System.nanoTime();
            progress.put("load", timings(total, t0, t1, t2, t3, t4));
            Map<String, Object> placement = new LinkedHashMap<>();
            placement.put("policy", policy.toString());
            placement.put("page_size", pages.pageSize());
            pagesByNode.forEach((n, c) -> placement.put("node" + n, c));
            progress.put("placement", placement);
            return new Catalog(manifest(plan, regions.items(), regionNode, digests), fds(regions.items()),
                    fingerprint.sha256Hex(), new FingerprintMatch(fingerprint), pages.hugetlb() ? "memfd-hugetlb" : "memfd",
                    regions);
        } catch (Exception e) {
            regions.close();
            throw e;
        }
    }

    private static int dominantNode(PlacementReport r) {
        return r.pagesByNode().entrySet().stream().max(Map.Entry.comparingByValue()).map(Map.Entry::getKey).orElse(-1);
    }

    private static Map<String, Object> timings(long bytes, long t0, long t1, long t2, long t3, long t4) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("create_s", (t1 - t0) / 1e9);
        m.put("read_s", (t2 - t1) / 1e9);
        double read = (t2 - t1) / 1e9;
        m.put("read_gib_s", read > 0 ? bytes / read / (1L << 30) : 0.0);
        m.put("digest_s", (t3 - t2) / 1e9);
        m.put("verify_seal_s", (t4 - t3) / 1e9);
        return m;
    }

    private Manifest manifest(RegionPlan plan, List<MemfdRegion> regions, int[] regionNode, long[] digests) {
        RegionKind kind = pages.hugetlb() ? RegionKind.MEMFD_HUGETLB : RegionKind.MEMFD;
        List<Manifest.Region> rs = new ArrayList<>();
        for (int i = 0; i < regions.size(); i++) {
            rs.add(new Manifest.Region(kind, regions.get(i).size(), regionNode[i], -1));
        }
        List<Manifest.Table> ts = new ArrayList<>();
        for (int i = 0; i < tensors.size(); i++) {
            TensorInfo t = tensors.get(i);
            RegionPlan.Slot s = plan.slots().get(i);
            ts.add(new Manifest.Table(t.name(), t.dtype().name(), t.shape(), t.length(), s.region(), s.offset(), digests[i],
                    kind, s.region() < 0 ? -1 : regionNode[s.region()], -1));
        }
        return new Manifest(HexFormat.of().parseHex(fingerprint.sha256Hex()), fingerprint.canonicalBytes(), rs, ts);
    }

    private static List<Fd> fds(List<MemfdRegion> regions) {
        return regions.stream().map(MemfdRegion::fd).toList();
    }
}
