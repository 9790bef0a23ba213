package io.engramhost.store;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.seed.SeedSettings;
import io.engramhost.seed.Seeder;
import io.engramhost.util.Bytes;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The fill from the peers ({@code --seed-from}, docs/seeding.md): every non-empty table that has a digest to be checked
 * against, asked for in the order its region is created ({@link RegionCreator#creationOrder}, the creator started on
 * its own thread) and filled as soon as that region exists, through {@link Seeder}. What arrived with the record's
 * digest is filled; the rest the disk reads. STATUS's origin gets each source's share.
 */
final class SeedFill implements Fill {
    private static final System.Logger LOG = System.getLogger(HostCatalogBuilder.class.getName());

    @Override
    public Result fill(Target target, Result before) throws InterruptedException {
        LoadSettings s = target.settings();
        RegionPlan plan = target.plan();
        LoadProgress progress = target.progress();
        SeedSettings seed = s.seed();
        List<TensorInfo> tensors = s.tensors();
        List<TensorInfo> candidates = new ArrayList<>();
        List<Seeder.Table> wanted = new ArrayList<>();
        int uncovered = 0;
        int[] created = new int[plan.regionSizes().size()]; // each region's place in the creation order
        List<Integer> creation = RegionCreator.creationOrder(plan);
        for (int k = 0; k < creation.size(); k++) {
            created[creation.get(k)] = k;
        }
        boolean[] stageable = stageable(plan, creation);
        List<Integer> order = new ArrayList<>(); // the tensors in the order their regions are created
        for (int i = 0; i < tensors.size(); i++) {
            if (plan.slots().get(i).region() >= 0) {
                order.add(i);
            }
        }
        order.sort(Comparator.comparingInt((Integer i) -> created[plan.slots().get(i).region()])
                .thenComparingLong(i -> plan.slots().get(i).offset()));
        RegionCreator creator = target.regions();
        long maxRegion = s.factory().maxRegion();
        for (int i : order) {
            TensorInfo t = tensors.get(i);
            RegionPlan.Slot slot = plan.slots().get(i);
            Long d = s.records().expectedDigest(t);
            if (t.length() == 0 || before.digests().containsKey(t)) {
                continue;
            }
            if (d == null) {
                uncovered++;
                continue;
            }
            candidates.add(t);
            wanted.add(new Seeder.Table(t.name(), t.length(), d, s.records().expectedTree(t),
                    chunk -> new Seeder.AddressOf<>(creator.region(slot.regionAt(chunk * ContentDigest.CHUNK,
                            maxRegion)), r -> creator.tableAddress(slot, r) + chunk * ContentDigest.CHUNK),
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
        Seeder.Result r = new Seeder(seed, s.threads(), line -> LOG.log(System.Logger.Level.WARNING, line),
                progress::advance).seed(wanted);
        long nanos = System.nanoTime() - t0;
        double seconds = nanos / 1e9;
        Map<TensorInfo, Long> out = new LinkedHashMap<>(before.digests());
        r.digests().forEach((i, d) -> out.put(candidates.get(i), d));
        List<TensorInfo> treeCheck = new ArrayList<>(before.treeCheck());
        for (int i : r.notSeeded()) {
            if (r.treeRefused().contains(i)) {
                treeCheck.add(candidates.get(i));
            }
        }
        int seeded = r.digests().size();
        long got = r.digests().keySet().stream().mapToLong(i -> candidates.get(i).length()).sum();
        List<LoadReport.SeedSource> sources = new ArrayList<>();
        for (Seeder.Source src : r.sources()) {
            sources.add(new LoadReport.SeedSource(src.peer(), src.bytes(), src.seconds()));
        }
        LoadReport.Seeded fact = new LoadReport.Seeded(sources, got, seconds, r.peersRefused(), r.stagedBytes());
        progress.report(rep -> rep.withSeeded(fact));
        LOG.log(System.Logger.Level.INFO, "seed: " + (r.stopped() ? "stopped, a region not created, after " : "")
                + seeded + " of " + candidates.size() + " tables ("
                + Bytes.format(got) + ") from " + r.sources().size() + (r.sources().size() == 1 ? " peer" : " peers")
                + " in " + String.format("%.2f s (%s)", seconds, Bytes.gibPerSecond(got, seconds))
                + (r.notSeeded().isEmpty() || r.stopped() ? "" : "; " + r.notSeeded().size() + " from the disk")
                + (r.stagingBuffers() == 0 ? "" : "; " + Bytes.format(r.stagedBytes()) + " of it held in "
                        + r.stagingBuffers() + " staging buffers of 64 MiB until its region existed"));
        return new Result(out, treeCheck, nanos, got, 0, null);
    }

    /**
     * Which regions a seed may stage the ranges of ({@code --seed-staging}), by region index, given the creation
     * {@code order}: the first region created, and a region larger than all the regions created after it. The first:
     * while it is created nothing else can be asked for, and on a link slower than the creation that time would be
     * lost to the link for good. The others: a region that as many bytes follow has its fill run while those are
     * created, as without staging, and staging it would only copy its bytes once more beside their creation; the last
     * region, and one larger than all that follow, gain (bench/seed-runs.md, "Staging").
     */
    private static boolean[] stageable(RegionPlan plan, List<Integer> order) {
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
}
