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
import io.engramhost.vmm.AttachTimings;
import io.engramhost.vmm.VmmImport;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

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
    final Map<String, Double> timings = new LinkedHashMap<>();
    /** Per region, the ms of each step that attached it. */
    final List<Map<String, Double>> perRegion = new ArrayList<>();

    private RegionAttach(int n) {
        host = new long[n];
        gpu = new long[n];
        for (int i = 0; i < n; i++) {
            perRegion.add(new LinkedHashMap<>());
        }
    }

    static RegionAttach attach(Manifest manifest, List<Fd> fds, ClientOptions options, List<AutoCloseable> resources) {
        RegionAttach a = new RegionAttach(fds.size());
        try {
            for (int i = 0; i < fds.size(); i++) {
                if (manifest.regions().get(i).kind().memfd()) {
                    SealCheck.check(manifest, i, fds.get(i)); // every memfd, before any is mapped
                }
            }
            List<Integer> vmmHost = new ArrayList<>();
            List<Integer> vmmDevice = new ArrayList<>();
            long mapNanos = 0;
            long registerNanos = 0;
            for (int i = 0; i < fds.size(); i++) {
                Manifest.Region r = manifest.regions().get(i);
                if (r.kind() == RegionKind.VMM_HOST) {
                    vmmHost.add(i);
                } else if (r.kind() == RegionKind.VMM_DEVICE) {
                    vmmDevice.add(i);
                } else if (r.kind().memfd()) {
                    long t0 = System.nanoTime();
                    Mapping m = ReadOnlyMapping.map(fds.get(i), r.size(), options.populate());
                    resources.add(m);
                    a.host[i] = m.address();
                    long t1 = System.nanoTime();
                    mapNanos += t1 - t0;
                    a.perRegion.get(i).put("mmap_ms", (t1 - t0) / 1e6);
                    if (options.gpuView()) {
                        HostRegistration reg = HostRegistration.register(m.address(), r.size(), requireGpu(options, r),
                                true);
                        resources.add(reg);
                        a.gpu[i] = reg.devicePointer();
                        long t2 = System.nanoTime();
                        registerNanos += t2 - t1;
                        a.perRegion.get(i).put("register_ms", (t2 - t1) / 1e6);
                    }
                } else {
                    throw new EngramClientException(ErrorCode.BAD_REQUEST, "region " + i + " has kind " + r.kind()
                            + ", which a client cannot attach", List.of());
                }
            }
            a.timings.put("map_ms", mapNanos / 1e6);
            if (options.gpuView()) {
                a.timings.put("register_ms", registerNanos / 1e6);
            }
            Access hostAccess = options.cpuView() ? Access.READ_ONLY.withCpuView() : Access.READ_ONLY;
            a.importVmm(manifest, fds, vmmHost, hostAccess, options, resources, "vmm");
            a.importVmm(manifest, fds, vmmDevice, Access.READ_ONLY, options, resources, "device");
            return a;
        } finally {
            fds.forEach(Fd::close);
        }
    }

    private void importVmm(Manifest manifest, List<Fd> fds, List<Integer> which, Access access, ClientOptions options,
            List<AutoCloseable> resources, String label) {
        if (which.isEmpty()) {
            return;
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
            AttachTimings one = imp.timings(j);
            Map<String, Double> m = perRegion.get(which.get(j));
            m.put("import_ms", one.importNanos() / 1e6);
            m.put("map_ms", one.reserveMapNanos() / 1e6);
            m.put("gpu_access_ms", one.gpuAccessNanos() / 1e6);
            if (access.cpuView()) {
                m.put("cpu_access_ms", one.cpuAccessNanos() / 1e6);
            }
        }
        AttachTimings t = imp.timings();
        timings.put(label + "_import_ms", t.importNanos() / 1e6);
        timings.put(label + "_map_ms", t.reserveMapNanos() / 1e6);
        timings.put(label + "_gpu_access_ms", t.gpuAccessNanos() / 1e6);
        if (access.cpuView()) {
            timings.put(label + "_cpu_access_ms", t.cpuAccessNanos() / 1e6);
        }
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
