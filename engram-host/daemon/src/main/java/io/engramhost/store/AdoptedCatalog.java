package io.engramhost.store;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.cuda.Cuda;
import io.engramhost.os.DirFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Handover;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.util.Closer;
import io.engramhost.vmm.Access;
import io.engramhost.vmm.VmmImport;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A catalog another daemon handed over (a predecessor's HANDOVER_CATALOG, or the catalog a previous run left in
 * systemd's fd store), checked before it is served: every region fd is what the manifests say it is (a memfd of
 * at least its size with the client-facing seals; a CUDA shareable handle for cuda-vmm), the fingerprint matches,
 * and, when asked, every table's digest is computed again from the memory. Nothing is read from a checkpoint.
 */
public final class AdoptedCatalog {
    private static final int REQUIRED_SEALS = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW;

    private AdoptedCatalog() {
    }

    /**
     * Builds the catalog from {@code handed} and its region fds, which it owns from here on (closing them all
     * when a check fails). {@code verifyDigests} reads every table once (host regions through a read-only
     * mapping or a CPU view, device tensors by a copy to host).
     *
     * @throws IllegalStateException naming the region or table and what is wrong
     */
    public static Catalog adopt(Handover.Catalog handed, List<Fd> regionFds, boolean verifyDigests) {
        Closer<AutoCloseable> owned = new Closer<>();
        regionFds.forEach(owned::add);
        try {
            if (regionFds.size() != handed.regionCount()) {
                throw new IllegalStateException(regionFds.size() + " region fds for " + handed.regionCount() + " regions");
            }
            Manifest.Region[] regions = new Manifest.Region[regionFds.size()];
            for (Handover.Served s : handed.served()) {
                for (int i = 0; i < s.regionFds().length; i++) {
                    Manifest.Region r = s.manifest().regions().get(i);
                    Manifest.Region seen = regions[s.regionFds()[i]];
                    if (seen != null && !seen.equals(r)) {
                        throw new IllegalStateException("region fd " + s.regionFds()[i] + " is described twice,"
                                + " differently: " + seen + " and " + r);
                    }
                    regions[s.regionFds()[i]] = r;
                }
            }
            for (int i = 0; i < regions.length; i++) {
                if (regions[i] == null) {
                    throw new IllegalStateException("region fd " + i + " belongs to no manifest");
                }
                check(regionFds.get(i), regions[i], i);
            }
            Fingerprint fingerprint = Fingerprint.decode(handed.served().get(0).manifest().fingerprint());
            if (!fingerprint.sha256Hex().equals(handed.fingerprintSha256())) {
                throw new IllegalStateException("the fingerprint handed over hashes to " + fingerprint.sha256Hex()
                        + ", not " + handed.fingerprintSha256());
            }
            Map<Integer, Catalog.Served> byDevice = new HashMap<>();
            for (Handover.Served s : handed.served()) {
                List<Fd> fds = new ArrayList<>();
                for (int idx : s.regionFds()) {
                    fds.add(regionFds.get(idx));
                }
                if (verifyDigests) {
                    verify(s.manifest(), fds, s.device());
                }
                byDevice.put(s.device(), new Catalog.Served(s.manifest(), fds));
            }
            return new Catalog(byDevice, handed.fingerprintSha256(),
                    new FingerprintMatch(fingerprint, handed.served().get(0).manifest().fingerprint()), handed.backend(),
                    owned);
        } catch (RuntimeException e) {
            owned.closeAfter(e);
            throw e;
        }
    }

    /**
     * Why the memfd regions of {@code catalog} must be loaded again although they passed {@link #adopt}'s checks, or
     * null: a build before WRITE sealed them FUTURE_WRITE, which leaves writable a mapping made before it, and clients
     * of this build refuse such a memfd. A successor says so in one line and loads the checkpoint once instead.
     */
    public static String sealedBeforeWrite(Catalog catalog) {
        Catalog.Served host = catalog.servedTo(-1);
        for (int i = 0; i < host.fds().size(); i++) {
            if (host.manifest().regions().get(i).kind().memfd()
                    && (Posix.getSeals(host.fds().get(i)) & Posix.F_SEAL_WRITE) == 0) {
                return "its memfds were sealed by an older build (FUTURE_WRITE, which leaves writable a mapping made"
                        + " before it; clients of this build require WRITE)";
            }
        }
        return null;
    }

    /** A memfd must be at least the region's size and sealed as clients require; a VMM handle is the GPU driver's. */
    private static void check(Fd fd, Manifest.Region r, int index) {
        FileStat st = DirFd.stat(fd);
        if (r.kind().memfd()) {
            if (!st.isRegular()) {
                throw new IllegalStateException("region fd " + index + " (" + r.kind().backend() + ") is " + st.typeName()
                        + ", not a memfd");
            }
            if (st.size() < r.size()) {
                throw new IllegalStateException("region fd " + index + " holds " + st.size() + " bytes, its manifest says "
                        + r.size());
            }
            int seals = Posix.getSeals(fd);
            if ((seals & REQUIRED_SEALS) != REQUIRED_SEALS
                    || (seals & (Posix.F_SEAL_WRITE | Posix.F_SEAL_FUTURE_WRITE)) == 0) {
                throw new IllegalStateException("region fd " + index + " lacks the seals clients require (has 0x"
                        + Integer.toHexString(seals) + ")");
            }
        } else if (!st.isCharDevice()) {
            throw new IllegalStateException("region fd " + index + " (" + r.kind().backend() + ") is " + st.typeName()
                    + ", not a CUDA shareable handle");
        }
    }

    /** Computes every table's engram digest again and compares it with the manifest's. */
    private static void verify(Manifest m, List<Fd> fds, int device) {
        List<Manifest.Region> regions = m.regions();
        boolean vmm = regions.stream().anyMatch(r -> !r.kind().memfd());
        long[] base = new long[regions.size()];
        List<AutoCloseable> views = new ArrayList<>();
        try {
            VmmImport host = null;
            VmmImport onGpu = null;
            if (vmm) {
                List<Fd> hostFds = new ArrayList<>();
                List<Long> hostSizes = new ArrayList<>();
                List<Fd> devFds = new ArrayList<>();
                List<Long> devSizes = new ArrayList<>();
                for (int i = 0; i < regions.size(); i++) {
                    if (regions.get(i).kind() == RegionKind.VMM_HOST) {
                        hostFds.add(fds.get(i));
                        hostSizes.add(regions.get(i).size());
                    } else if (regions.get(i).kind() == RegionKind.VMM_DEVICE) {
                        devFds.add(fds.get(i));
                        devSizes.add(regions.get(i).size());
                    }
                }
                int gpu = device >= 0 ? device : 0;
                if (!hostFds.isEmpty()) {
                    host = VmmImport.attach(hostFds, hostSizes, gpu, Access.READ_ONLY.withCpuView());
                    views.add(host);
                }
                if (!devFds.isEmpty()) {
                    onGpu = VmmImport.attach(devFds, devSizes, device, Access.READ_ONLY);
                    views.add(onGpu);
                }
            }
            int h = 0;
            int g = 0;
            for (int i = 0; i < regions.size(); i++) {
                Manifest.Region r = regions.get(i);
                if (r.kind().memfd()) {
                    Mapping map = Posix.mmap(r.size(), Posix.PROT_READ, Posix.MAP_SHARED, fds.get(i), 0);
                    views.add(map);
                    base[i] = map.address();
                } else if (r.kind() == RegionKind.VMM_HOST) {
                    base[i] = host.base(h++);
                } else {
                    base[i] = -1 - g++; // a device region: tables are copied to host to digest them
                }
            }
            for (Manifest.Table t : m.tables()) {
                if (t.region() < 0 || (device >= 0 && t.device() != device && t.device() >= 0)) {
                    continue;
                }
                long digest;
                if (base[t.region()] >= 0) {
                    digest = ContentDigest.digestParallel(base[t.region()] + t.offset(), t.bytes(), 4);
                } else {
                    int dev = (int) (-1 - base[t.region()]);
                    try (Mapping scratch = Posix.mmapAnonymous(Math.max(t.bytes(), 1), "digest of " + t.name())) {
                        Cuda.copyDeviceToHost(device, scratch.address(), onGpu.base(dev) + t.offset(), t.bytes());
                        digest = ContentDigest.digest(scratch.address(), t.bytes());
                    }
                }
                if (digest != t.digest()) {
                    throw new IllegalStateException("table " + t.name() + " digests to " + String.format("%016x", digest)
                            + " in the memory handed over, its manifest says " + String.format("%016x", t.digest()));
                }
            }
        } finally {
            for (int i = views.size() - 1; i >= 0; i--) {
                try {
                    views.get(i).close();
                } catch (Exception ignored) {
                    // a view made only to read; nothing is lost if closing it fails
                }
            }
        }
    }
}
