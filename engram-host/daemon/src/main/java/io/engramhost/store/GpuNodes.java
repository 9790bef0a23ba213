package io.engramhost.store;

import io.engramhost.numa.Topology;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.OptionalInt;
import java.util.stream.Stream;

/**
 * The NUMA nodes of this machine's NVIDIA GPUs, read from sysfs (PCI vendor 0x10de, display or 3D
 * controller class), for {@code --numa auto}. A GPU whose sysfs node is -1 reports empty here;
 * {@link CudaPlacement} fills it from CUDA's HOST_NUMA_ID where the driver is present.
 */
public final class GpuNodes {
    private GpuNodes() {
    }

    /** PCI bus ids of NVIDIA GPUs under {@code root}/sys/bus/pci/devices, sorted. */
    public static List<String> pciBusIds(Path root) {
        Path devices = root.resolve("sys/bus/pci/devices");
        List<String> out = new ArrayList<>();
        if (!Files.isDirectory(devices)) {
            return out;
        }
        try (Stream<Path> s = Files.list(devices)) {
            for (Path d : s.sorted().toList()) {
                String vendor = read(d.resolve("vendor"));
                String cls = read(d.resolve("class"));
                if ("0x10de".equals(vendor) && (cls.startsWith("0x0300") || cls.startsWith("0x0302"))) {
                    out.add(d.getFileName().toString());
                }
            }
        } catch (IOException e) {
            return out;
        }
        return out;
    }

    public static List<OptionalInt> nodes(Topology topology, Path root) {
        List<OptionalInt> out = new ArrayList<>();
        for (String id : pciBusIds(root)) {
            out.add(topology.gpuNode(id));
        }
        return out;
    }

    private static String read(Path p) {
        try {
            return Files.readString(p).trim().toLowerCase(Locale.ROOT);
        } catch (IOException e) {
            return "";
        }
    }
}
