package io.engramhost.client;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.HostRegistration;
import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.vmm.Access;
import io.engramhost.util.Lap;
import io.engramhost.vmm.VmmImport;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Attaches a manifest's regions in the client: memfds are checked ({@link SealCheck}: sealed, big
 * enough; all of them before the first is mapped), then mapped read-only (and registered with CUDA
 * for a GPU view); cuda-vmm fds are imported into one VA range and given GPU access (and HOST_NUMA
 * access for a CPU view). Every resource goes into {@code resources}, in the order to undo in reverse.
 * The fds are closed once attached: the mappings and imports keep the memory.
 */
final class RegionAttach {
    final long[] host;
    final long[] gpu;
    /** Every memfd's mmap, summed. */
    long mapNanos;
    /** Every memfd's registration, summed; {@link ImportTimings#NOT_MEASURED} without a GPU view. */
    long registerNanos;
    /** The cuda-vmm HOST_NUMA regions' import, or null without any. */
    ImportTimings.Vmm vmm;
    /** The cuda-vmm device regions' import, or null without any. */
    ImportTimings.Vmm device;
    /** Per region, each step that attached it. */
    final RegionTimings[] perRegion;

    private RegionAttach(int n, boolean gpuView) {
        registerNanos = gpuView ? 0 : ImportTimings.NOT_MEASURED;
        host = new long[n];
        gpu = new long[n];
        perRegion = new RegionTimings[n];
        Arrays.fill(perRegion, RegionTimings.NONE);
    }

    /** Looks at {@code cancel} before each region's attach (a background connect's close throws there). */
    static RegionAttach attach(Manifest manifest, List<Fd> fds, ClientOptions options, List<AutoCloseable> resources,
            Cancel cancel) {
        RegionAttach a = new RegionAttach(fds.size(), options.gpuView());
        try {
            for (int i = 0; i < fds.size(); i++) {
                if (manifest.regions().get(i).kind().memfd()) {
                    SealCheck.check(manifest, i, fds.get(i), options.futureWriteSeal()); // every memfd, before any is mapped
                }
            }
            List<Integer> vmmHost = new ArrayList<>();
            List<Integer> vmmDevice = new ArrayList<>();
            for (int i = 0; i < fds.size(); i++) {
                Manifest.Region r = manifest.regions().get(i);
                if (r.kind() == RegionKind.VMM_HOST) {
                    vmmHost.add(i);
                } else if (r.kind() == RegionKind.VMM_DEVICE) {
                    vmmDevice.add(i);
                } else if (r.kind().memfd()) {
                    cancel.check();
                    Lap lap = Lap.start();
                    Mapping m = ReadOnlyMapping.map(fds.get(i), r.size(), options.populate());
                    resources.add(m);
                    a.host[i] = m.address();
                    long mmapNanos = lap.lap();
                    a.mapNanos += mmapNanos;
                    long registerNanos = RegionTimings.NOT_MEASURED;
                    if (options.gpuView()) {
                        HostRegistration reg = HostRegistration.register(m.address(), r.size(), requireGpu(options, r),
                                true);
                        resources.add(reg);
                        a.gpu[i] = reg.devicePointer();
                        registerNanos = lap.lap();
                        a.registerNanos += registerNanos;
                    }
                    a.perRegion[i] = RegionTimings.memfd(mmapNanos, registerNanos);
                } else {
                    throw new EngramClientException(ErrorCode.BAD_REQUEST, "region " + i + " has kind " + r.kind()
                            + ", which a client cannot attach", List.of());
                }
            }
            Access hostAccess = options.cpuView() ? Access.READ_ONLY.withCpuView() : Access.READ_ONLY;
            cancel.check();
            a.vmm = a.importVmm(manifest, fds, vmmHost, hostAccess, options, resources);
            cancel.check();
            a.device = a.importVmm(manifest, fds, vmmDevice, Access.READ_ONLY, options, resources);
            return a;
        } finally {
            fds.forEach(Fd::close);
        }
    }

    /** Imports the regions {@code which} as one {@link VmmImport}; returns its timings, or null for none. */
    private ImportTimings.Vmm importVmm(Manifest manifest, List<Fd> fds, List<Integer> which, Access access,
            ClientOptions options, List<AutoCloseable> resources) {
        if (which.isEmpty()) {
            return null;
        }
        Manifest.Region first = manifest.regions().get(which.get(0));
        int device = requireGpu(options, first);
        List<Fd> f = new ArrayList<>();
        List<Long> sizes = new ArrayList<>();
        for (int i : which) {
            f.add(fds.get(i));
            sizes.add(manifest.regions().get(i).size());
        }
        VmmImport imp = VmmImport.attach(f, sizes, device, access);
        resources.add(imp);
        for (int j = 0; j < which.size(); j++) {
            gpu[which.get(j)] = imp.base(j);
            if (access.cpuView()) {
                host[which.get(j)] = imp.base(j);
            }
            perRegion[which.get(j)] = RegionTimings.vmm(imp.timings(j), access.cpuView());
        }
        return ImportTimings.Vmm.of(imp.timings(), access.cpuView());
    }

    private static int requireGpu(ClientOptions options, Manifest.Region r) {
        if (options.device() < 0) {
            throw new EngramClientException(ErrorCode.BAD_REQUEST, r.kind().backend() + " memory needs a GPU to attach:"
                    + " import with a device (--gpu --device N)", List.of());
        }
        if (!Cuda.available()) {
            throw new EngramClientException(ErrorCode.BAD_REQUEST, r.kind().backend() + " memory needs CUDA: "
                    + Cuda.unavailabilityCause(), List.of());
        }
        return options.device();
    }
}
