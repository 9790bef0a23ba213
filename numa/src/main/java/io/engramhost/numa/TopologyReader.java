package io.engramhost.numa;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Stream;

/** Builds a {@link Topology} from the sysfs and procfs files under a root folder. */
final class TopologyReader {
    static final String NODE_DIR = "sys/devices/system/node";

    private final Path root;
    private final long pageSize;

    TopologyReader(Path root, long pageSize) {
        this.root = root;
        this.pageSize = pageSize;
    }

    Topology read() {
        Path nodeDir = root.resolve(NODE_DIR);
        Path procMeminfo = root.resolve("proc/meminfo");
        Map<Long, HugePagePool> systemPools = HugePagePool.readAll(root.resolve("sys/kernel/mm/hugepages"));
        long nrHugepages = Sysfs.readIfExists(root.resolve("proc/sys/vm/nr_hugepages"))
                .map(s -> Sysfs.parseLong(s, root.resolve("proc/sys/vm/nr_hugepages"))).orElse(-1L);
        if (!Files.isDirectory(nodeDir)) {
            return single(procMeminfo, systemPools, nrHugepages);
        }
        List<Integer> online = CpuList.parse(Sysfs.read(nodeDir.resolve("online")), nodeDir.resolve("online"));
        if (online.isEmpty()) {
            throw new NumaException(nodeDir.resolve("online") + ": no online nodes");
        }
        List<Integer> withMemory = Sysfs.readIfExists(nodeDir.resolve("has_memory"))
                .map(s -> CpuList.parse(s, nodeDir.resolve("has_memory"))).orElse(null);
        List<NumaNode> nodes = new ArrayList<>();
        for (int id : online) {
            Path dir = nodeDir.resolve("node" + id);
            List<Integer> cpus = CpuList.parse(Sysfs.read(dir.resolve("cpulist")), dir.resolve("cpulist"));
            Meminfo mem = Meminfo.parse(Sysfs.read(dir.resolve("meminfo")), dir.resolve("meminfo"));
            boolean hasMemory = withMemory == null ? mem.totalBytes() > 0 : withMemory.contains(id);
            nodes.add(new NumaNode(id, cpus, hasMemory, mem, distances(dir.resolve("distance"), online),
                    HugePagePool.readAll(dir.resolve("hugepages"))));
        }
        Meminfo system = Sysfs.readIfExists(procMeminfo).map(s -> Meminfo.parse(s, procMeminfo))
                .orElseGet(() -> nodes.stream().map(NumaNode::memory).reduce(Meminfo::plus).orElseThrow());
        return new Topology(root, true, nodes, system, systemPools, nrHugepages, lowWatermarks(), growableMemory());
    }

    /** No NUMA sysfs (a kernel without CONFIG_NUMA, some containers): one node 0 with all memory. */
    private Topology single(Path procMeminfo, Map<Long, HugePagePool> systemPools, long nrHugepages) {
        String text = Sysfs.readIfExists(procMeminfo).orElseThrow(() -> new NumaException("neither "
                + root.resolve(NODE_DIR) + " nor " + procMeminfo + " exists: cannot tell how much memory there is"));
        Meminfo system = Meminfo.parse(text, procMeminfo);
        Path cpuOnline = root.resolve("sys/devices/system/cpu/online");
        List<Integer> cpus = Sysfs.readIfExists(cpuOnline).map(s -> CpuList.parse(s, cpuOnline)).orElse(List.of());
        NumaNode node0 = new NumaNode(0, cpus, true, system, Map.of(0, 10), systemPools);
        return new Topology(root, false, List.of(node0), system, systemPools, nrHugepages, lowWatermarks(),
                growableMemory());
    }

    /**
     * The first device bound to the virtio balloon or virtio-mem driver ({@code sys/bus/virtio/drivers/virtio_balloon}
     * or {@code virtio_mem}, entries named {@code virtio*}): memory the host may add as it is used. A driver folder
     * that is missing or unreadable counts as no device.
     */
    private Optional<String> growableMemory() {
        for (String[] driver : new String[][] {{"virtio_mem", "virtio-mem"}, {"virtio_balloon", "virtio-balloon"}}) {
            Path dir = root.resolve("sys/bus/virtio/drivers").resolve(driver[0]);
            try (Stream<Path> entries = Files.list(dir)) {
                Optional<String> device = entries.map(e -> e.getFileName().toString())
                        .filter(n -> n.startsWith("virtio")).sorted().findFirst();
                if (device.isPresent()) {
                    return Optional.of("a " + driver[1] + " device (" + device.get() + ")");
                }
            } catch (IOException | SecurityException e) {
                // no such driver here, or not readable: nothing to say
            }
        }
        return Optional.empty();
    }

    /** {@code proc/zoneinfo}'s low watermarks; a missing or unreadable file is noted there, not thrown. */
    private LowWatermarks lowWatermarks() {
        return LowWatermarks.read(root.resolve("proc/zoneinfo"), pageSize);
    }

    /** {@code nodeN/distance}: one number per online node, in ascending node order. */
    private static Map<Integer, Integer> distances(Path file, List<Integer> online) {
        String text = Sysfs.read(file).strip();
        String[] parts = text.isEmpty() ? new String[0] : text.split("\\s+");
        if (parts.length != online.size()) {
            throw new NumaException(file + ": " + parts.length + " distances for " + online.size()
                    + " online nodes (" + CpuList.format(online) + ")");
        }
        Map<Integer, Integer> out = new LinkedHashMap<>();
        for (int i = 0; i < parts.length; i++) {
            out.put(online.get(i), (int) Sysfs.parseLong(parts[i], file));
        }
        return out;
    }
}
