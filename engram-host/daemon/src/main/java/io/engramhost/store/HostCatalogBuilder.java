package io.engramhost.store;

import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import io.engramhost.util.Closer;
import java.util.List;
import java.util.Map;

/**
 * Loads the selected host tables into one backend's regions and, when asked, the device tensors into GPU memory: the
 * conductor of the load's stages, run in order, each a class of its own. The settings ({@link LoadSettings}) are
 * checked once, where they enter; the regions are planned (large tensors alone, small ones packed, a table larger
 * than the factory's largest region over a run of regions, {@link RegionPlan}); {@link RegionCreator} creates them
 * (NUMA policy before the first touch) while the fills put the bytes in each one created, the peers' first when
 * seeding ({@link SeedFill}), then the disk's ({@link DiskFill}, which digests as it reads and checks the digests
 * against the records); {@link Sealer} verifies placement and seals, in parallel; the manifests are assembled. The
 * memory budget is checked by the caller before the daemon takes its socket.
 *
 * <p>Every byte is read through the fds the checkpoint was validated from ({@link OpenCheckpoint}), and once
 * everything is read each file is checked unchanged (size, times, header, and the path still naming it); a file that
 * changed fails the load with one line, so what is served is what was validated. The builder owns those fds and closes
 * them when {@link #build} returns or throws; and it owns, through one {@link Closer}, every region and run range the
 * stages make: on a failure the creation is stopped and each of them is closed once.
 */
public final class HostCatalogBuilder implements CatalogBuilder {
    /** Tensors at least this large get a region of their own. */
    static final long OWN_REGION_BYTES = 64L << 20;
    /** Packed regions are closed at this size. */
    static final long PACK_LIMIT_BYTES = 1L << 30;
    /** What a load that found its checkpoint changed says after the file and the change. */
    static final String CHANGED_CONSEQUENCE = "refusing to serve it; restart the daemon once the file is stable";
    private static final System.Logger LOG = System.getLogger(HostCatalogBuilder.class.getName());

    private final LoadSettings settings;
    private final RegionPlan plan;

    HostCatalogBuilder(LoadSettings settings) {
        this.settings = settings;
        this.plan = RegionPlan.plan(settings.tensors().stream().map(TensorInfo::length).toList(), OWN_REGION_BYTES,
                PACK_LIMIT_BYTES, (int) Posix.pageSize(), settings.factory().granule(), settings.factory().maxRegion());
    }

    long plannedBytes() {
        return plan.totalBytes();
    }

    /** The staging a seed may use beside the regions ({@code --seed-staging}); 0 without seeding. */
    long stagingBytes() {
        return settings.seed() == null ? 0 : settings.seed().stagingBytes();
    }

    /** The fds a client's manifest carries at most: the host regions and one GPU's device regions. */
    int regionCount() {
        DeviceTensors device = settings.deviceTensors();
        return plan.regionSizes().size() + (device == null ? 0 : device.regionCount());
    }

    @Override
    public void close() {
        settings.source().close();
    }

    @Override
    public Catalog build(LoadProgress progress) throws Exception {
        LoadSettings s = settings;
        List<TensorInfo> tensors = s.tensors();
        Closer<AutoCloseable> owned = new Closer<>();
        RegionCreator creator = null;
        try {
            long total = tensors.stream().mapToLong(TensorInfo::length).sum();
            progress.phase(LoadProgress.READ, "creating " + plan.regionSizes().size() + " " + s.backend()
                    + " regions and loading " + tensors.size() + " tensors into them with " + s.threads()
                    + " threads", total);
            creator = new RegionCreator(s.factory(), plan, tensors, owned);
            Fill.Target target = new Fill.Target(s, plan, creator, progress);
            Fill.Result seeded = Fill.Result.NONE;
            if (s.seed() != null) {
                // the regions are created one after another on a thread of their own, and the peers fill each one as
                // soon as it exists; then the disk reads what they did not give, region by region
                creator.start(RegionCreator.creationOrder(plan));
                seeded = new SeedFill().fill(target, seeded);
                progress.phase(LoadProgress.READ, "loading " + (tensors.size() - seeded.digests().size())
                        + " tensors from the checkpoint with " + s.threads() + " threads", total - seeded.bytes());
            }
            Fill.Result read = new DiskFill().fill(target, seeded);
            long createNanos = creator.finish();
            long t2 = System.nanoTime();
            progress.phase(LoadProgress.VERIFY, "verifying placement and sealing", 0);
            List<HostRegion> regions = creator.created();
            int[] regionNode = new Sealer(s.factory(), s.threads()).seal(regions, plan, tensors, progress);
            LoadTimings timings = new LoadTimings(createNanos, plan.totalBytes(), read.nanos(), read.bytes(),
                    read.directBytes(), System.nanoTime() - t2);
            progress.loadTimings(timings);
            LOG.log(System.Logger.Level.INFO, timings.describe() + (read.directRefused() != null
                    ? "; O_DIRECT refused, read through the page cache: " + read.directRefused() : ""));
            ManifestAssembler manifests = manifests(regions, regionNode, read.digests());
            if (s.deviceTensors() != null) {
                s.deviceTensors().load(s.source(), manifests, owned, progress, s.threads(), s.hooks());
            }
            progress.phase(LoadProgress.CHECK, "checking the checkpoint is unchanged", 0);
            s.source().checkUnchanged("during the load", CHANGED_CONSEQUENCE);
            Map<Integer, Catalog.Served> served = manifests.build();
            return new Catalog(served, s.fingerprint().sha256Hex(),
                    new FingerprintMatch(s.fingerprint(), served.get(-1).manifest().fingerprint()), s.backend(), owned);
        } catch (Exception e) {
            if (creator != null) {
                creator.stop(); // no region is created, nor handed to anyone, once the owner closes them
            }
            owned.closeAfter(e);
            throw e;
        } finally {
            s.source().close();
        }
    }

    /** The host regions' fds and every table's place, node and digest, for the manifests. */
    private ManifestAssembler manifests(List<HostRegion> regions, int[] regionNode, Map<TensorInfo, Long> digests) {
        HostRegionFactory factory = settings.factory();
        ManifestAssembler manifests = new ManifestAssembler(settings.fingerprint());
        for (int i = 0; i < regions.size(); i++) {
            manifests.hostRegion(new Manifest.Region(factory.kind(), regions.get(i).size(), regionNode[i], -1),
                    regions.get(i).fd());
        }
        for (int i = 0; i < settings.tensors().size(); i++) {
            TensorInfo t = settings.tensors().get(i);
            RegionPlan.Slot slot = plan.slots().get(i);
            manifests.hostTable(new Manifest.Table(t.name(), t.dtype().name(), t.shape(), t.length(), slot.region(),
                    slot.offset(), digests.get(t), factory.kind(), slot.region() < 0 ? -1 : regionNode[slot.region()],
                    -1));
        }
        return manifests;
    }
}
