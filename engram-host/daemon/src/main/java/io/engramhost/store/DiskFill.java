package io.engramhost.store;

import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.numa.CpuList;
import io.engramhost.numa.NumaNode;
import io.engramhost.numa.Topology;
import io.engramhost.os.Posix;
import io.engramhost.util.RegionRuns;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The fill from the disk: the loader's threads read every table the fills before did not give straight into its
 * region, region by region as each is created (the reads of one overlap the next creation), and digest it as they
 * read; a table over a run is read in parts, one a region. Then every table's digest, the peers' as well, is checked
 * against the digest records ({@link RecordCheck}), and the tables a peer sent with the record's engram digest v1 but
 * another sha256-tree-v1 have their disk bytes' tree digest checked against the record.
 */
final class DiskFill implements Fill {
    private static final System.Logger LOG = System.getLogger(HostCatalogBuilder.class.getName());

    /** The loader the daemon uses: its progress goes to {@code progress}, and each piece read to {@code hooks}. */
    static CheckpointLoader loader(int threads, LoadProgress progress, DaemonHooks hooks) {
        return new CheckpointLoader(threads, CheckpointLoader.DEFAULT_PIECE, (done, all) -> {
            progress.done(done);
            hooks.reached(DaemonHooks.Point.LOAD_AFTER_CHUNK);
        });
    }

    @Override
    public Result fill(Target target, Result before) throws Exception {
        LoadSettings s = target.settings();
        RegionPlan plan = target.plan();
        List<TensorInfo> tensors = s.tensors();
        List<Long> sizes = plan.regionSizes();
        Map<TensorInfo, Long> fromPeers = before.digests();
        long readTotal = tensors.stream().filter(t -> !fromPeers.containsKey(t)).mapToLong(TensorInfo::length).sum();
        long maxRegion = s.factory().maxRegion();
        Map<TensorInfo, Long> address = new LinkedHashMap<>();
        CheckpointLoader.Result read;
        try (CheckpointLoader.Session session = loaderOnNode(s, target.progress()).start(s.source(), readTotal)) {
            s.hooks().reached(DaemonHooks.Point.LOAD_BEFORE_READ);
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
                HostRegion region = target.regions().next(i);
                List<TensorInfo> in = new ArrayList<>();
                for (int t : byRegion.get(i)) {
                    TensorInfo tensor = tensors.get(t);
                    RegionPlan.Slot slot = plan.slots().get(t);
                    long at = target.regions().tableAddress(slot, region);
                    address.put(tensor, at);
                    if (fromPeers.containsKey(tensor)) {
                        continue;
                    }
                    if (slot.regions() <= 1) {
                        in.add(tensor);
                    } else {
                        int k = i - slot.region();
                        session.addPart(tensor, at, RegionRuns.start(k, maxRegion),
                                RegionRuns.end(k, tensor.length(), maxRegion));
                    }
                }
                session.add(in, address::get);
            }
            read = session.finish();
        }
        Map<TensorInfo, Long> digests = new LinkedHashMap<>();
        for (TensorInfo t : tensors) { // the digest records, against the digests the read (or a peer's bytes) gave
            Long peer = fromPeers.get(t);
            digests.put(t, peer != null ? peer : read.digest(t));
            s.records().check(t, digests.get(t));
        }
        checkTrees(s, before.treeCheck(), address);
        return new Result(digests, List.of(), Math.round(read.readSeconds() * 1e9), readTotal, read.directBytes(),
                read.directRefused());
    }

    /**
     * The host load's loader: when the regions go to one node (bound, or preferred), its threads run on that node's
     * CPUs, so that the pages they fill are touched from the node that holds them and the reads' copies stay local;
     * STATUS shows it ({@code load_threads}). With no such node, or CPUs this process may not use, the threads run
     * anywhere.
     */
    private static CheckpointLoader loaderOnNode(LoadSettings s, LoadProgress progress) {
        int threads = s.threads();
        CheckpointLoader loader = loader(threads, progress, s.hooks());
        int node = s.factory().loadNode();
        Optional<NumaNode> n = node < 0 ? Optional.empty() : Topology.read().node(node);
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

    /**
     * The record's sha256-tree-v1 of each table the disk filled after a peer's bytes had the record's engram digest
     * v1 but not its tree digest: the disk decides between the peer and the record. When the disk's bytes have the
     * record's tree digest the peer lied (and was dropped); when they do not, the record disagrees with the
     * checkpoint's own bytes, and the load refuses to serve the table as it does for an engram digest v1 difference.
     */
    private static void checkTrees(LoadSettings s, List<TensorInfo> disk, Map<TensorInfo, Long> address) {
        if (disk.isEmpty()) {
            return;
        }
        List<TreeDigest.Source> sources = new ArrayList<>();
        disk.forEach(t -> sources.add(new TreeDigest.Memory(address.get(t), t.length())));
        List<byte[]> trees = TreeDigest.digestAll(sources, s.threads());
        for (int i = 0; i < disk.size(); i++) {
            s.records().checkTree(disk.get(i), trees.get(i), "checked because a peer sent this table with the record's"
                    + " engram digest v1 but another " + TreeDigest.ALGORITHM);
            LOG.log(System.Logger.Level.WARNING, "seed: table '" + disk.get(i).name() + "' read from the disk has the"
                    + " record's " + TreeDigest.ALGORITHM + ": the bytes that peer sent were not the checkpoint's,"
                    + " though made to have its engram digest v1");
        }
    }
}
