package io.engramhost.cli;

import io.engramhost.numa.Topology;
import io.engramhost.store.GpuNodes;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** What the CLI needs to know about GPUs. */
final class GpuInfo {
    private GpuInfo() {
    }

    /** The UUID of GPU {@code device}, for {device_uuid}. */
    static String uuidOf(int device) {
        throw new IllegalArgumentException("{device_uuid} needs the CUDA driver, which this build does not use yet");
    }

    static String cudaState() {
        return "not used by this build";
    }

    /** NVIDIA GPUs found in sysfs, with their NUMA node. */
    static List<Map<String, Object>> describe(Topology topology) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (String id : GpuNodes.pciBusIds(Path.of("/"))) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("pci_bus_id", id);
            m.put("numa_node", topology.gpuNode(id).isPresent() ? topology.gpuNode(id).getAsInt() : -1);
            out.add(m);
        }
        return out;
    }
}
