package io.engramhost.cli;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaDevice;
import io.engramhost.numa.Topology;
import io.engramhost.store.GpuNodes;
import io.engramhost.vmm.VmmSupport;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;

/** What the CLI shows about GPUs: from the CUDA driver where it is present, else from sysfs. */
final class GpuInfo {
    private GpuInfo() {
    }

    /** The UUID of GPU {@code device}, for {device_uuid}. */
    static String uuidOf(int device) {
        if (!Cuda.available()) {
            throw new IllegalArgumentException("{device_uuid} needs the CUDA driver: " + Cuda.unavailabilityCause());
        }
        if (device < 0 || device >= Cuda.deviceCount()) {
            throw new IllegalArgumentException("--device " + device + ": this machine has " + Cuda.deviceCount() + " GPUs");
        }
        return Cuda.device(device).uuid();
    }

    static String cudaState() {
        return Cuda.available() ? "driver " + Cuda.driverVersion() + ", " + Cuda.deviceCount() + " GPUs"
                : "unavailable: " + Cuda.unavailabilityCause();
    }

    static List<Map<String, Object>> describe(Topology topology) {
        List<Map<String, Object>> out = new ArrayList<>();
        if (Cuda.available()) {
            for (int i = 0; i < Cuda.deviceCount(); i++) {
                CudaDevice d = Cuda.device(i);
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("ordinal", d.ordinal());
                m.put("name", d.name());
                m.put("pci_bus_id", d.pciBusId());
                m.put("uuid", d.uuid());
                OptionalInt sysfs = topology.gpuNode(d.pciBusId());
                m.put("numa_node_sysfs", sysfs.isPresent() ? sysfs.getAsInt() : -1);
                m.put("host_numa_id", d.hostNumaId());
                m.put("vmm", d.vmm());
                m.put("posix_fd_handles", d.posixFdHandles());
                m.put("host_numa_vmm", d.hostNumaVmm());
                m.put("read_only_host_register", d.readOnlyHostRegister());
                List<String> missing = VmmSupport.missingForHostTables(d);
                m.put("cuda_vmm_backend", missing.isEmpty() ? "supported" : "missing " + String.join(", ", missing));
                out.add(m);
            }
            return out;
        }
        for (String id : GpuNodes.pciBusIds(Path.of("/"))) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("pci_bus_id", id);
            OptionalInt node = topology.gpuNode(id);
            m.put("numa_node_sysfs", node.isPresent() ? node.getAsInt() : -1);
            out.add(m);
        }
        return out;
    }
}
