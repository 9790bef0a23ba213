package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;

import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.seed.ExportView;
import io.engramhost.store.Catalog;
import io.engramhost.util.Closer;
import io.engramhost.vmm.Access;
import io.engramhost.vmm.VmmImport;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.function.Supplier;

/**
 * The seed exporter's view of the daemon's host tables ({@link ExportView}), from the ready catalog: a read-only open
 * of each 4 KiB memfd region (sendfile(2) reads it), a read-only mapping of each hugetlb memfd region (sendfile(2)
 * from hugetlbfs fails with EINVAL), and one CPU view of every cuda-vmm host region (their fds are driver handles,
 * not readable: {@link VmmImport} with CPU access, read-only, as a client's CPU view and the takeover's digest check
 * make it). A failure closes what was opened; the export owns what it opened.
 */
final class CatalogExport implements ExportView {
    private static final System.Logger LOG = System.getLogger(CatalogExport.class.getName());
    private final Supplier<Catalog> catalog;
    private final int vmmDevice;

    /** {@code vmmDevice}: the GPU whose context makes the CPU view of cuda-vmm regions (the one they were made in). */
    CatalogExport(Supplier<Catalog> catalog, int vmmDevice) {
        this.catalog = catalog;
        this.vmmDevice = vmmDevice;
    }

    @Override
    public Maker ready() {
        Catalog c = catalog.get();
        return c == null ? null : () -> exportOf(c);
    }

    private Export exportOf(Catalog c) throws IOException {
        Catalog.Served host = c.servedTo(-1);
        List<Manifest.Region> regions = host.manifest().regions();
        Closer<AutoCloseable> owned = new Closer<>();
        try {
            Region[] byRegion = new Region[regions.size()];
            List<Integer> vmm = new ArrayList<>();
            for (int i = 0; i < regions.size(); i++) {
                RegionKind kind = regions.get(i).kind();
                if (kind == RegionKind.MEMFD_HUGETLB) {
                    byRegion[i] = new MemoryRegion(owned.add(ReadOnlyMapping.map(host.fds().get(i),
                            regions.get(i).size(), false)).address());
                } else if (kind.memfd()) {
                    byRegion[i] = new FileRegion(owned.add(FileChannel.open(Path.of("/proc/self/fd/"
                            + host.fds().get(i).get()), StandardOpenOption.READ)));
                } else if (kind == RegionKind.VMM_HOST) {
                    vmm.add(i);
                }
            }
            if (!vmm.isEmpty()) {
                List<Fd> fds = new ArrayList<>();
                List<Long> sizes = new ArrayList<>();
                for (int i : vmm) {
                    fds.add(host.fds().get(i));
                    sizes.add(regions.get(i).size());
                }
                long t0 = System.nanoTime();
                VmmImport view = owned.add(VmmImport.attach(fds, sizes, vmmDevice, Access.READ_ONLY.withCpuView()));
                for (int k = 0; k < vmm.size(); k++) {
                    byRegion[vmm.get(k)] = new MemoryRegion(view.base(k));
                }
                LOG.log(INFO, "seed: a CPU view of " + vmm.size() + " cuda-vmm regions to export them from, made in "
                        + String.format("%.2f s", (System.nanoTime() - t0) / 1e9));
            }
            List<Table> out = new ArrayList<>();
            for (Manifest.Table t : host.manifest().tables()) {
                if (t.region() < 0 || t.device() >= 0) {
                    continue;
                }
                Region from = byRegion[t.region()];
                if (from == null) {
                    throw new IOException("table '" + t.name() + "' is in region " + t.region() + " ("
                            + regions.get(t.region()).kind() + "), which this exporter has no view of");
                }
                out.add(new Table(t.name(), t.bytes(), t.digest(), from, t.offset()));
            }
            List<AutoCloseable> items = owned.items();
            return new Export(HexFormat.of().parseHex(c.fingerprintSha256()), out, () -> Closer.closeAll(items));
        } catch (IOException | RuntimeException e) {
            owned.closeAfter(e);
            throw e;
        }
    }
}
