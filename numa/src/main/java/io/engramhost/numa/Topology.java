package io.engramhost.numa;

import io.engramhost.os.Posix;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.stream.Collectors;

/**
 * The machine's NUMA layout, read once from sysfs under a root folder ({@code /} on a real machine, a
 * fixture in tests): online nodes with their CPUs, memory, distances, low watermarks ({@code proc/zoneinfo}) and huge
 * page pools, the system-wide memory and huge page figures, and which node a PCI device (a GPU) sits on.
 */
public final class Topology {
    private final Path root;
    private final boolean fromSysfs;
    private final List<NumaNode> nodes;
    private final Meminfo system;
    private final Map<Long, HugePagePool> systemHugePages;
    private final long nrHugepages;
    private final LowWatermarks lowWatermarks;
    private final Optional<String> growableMemory;

    Topology(Path root, boolean fromSysfs, List<NumaNode> nodes, Meminfo system,
            Map<Long, HugePagePool> systemHugePages, long nrHugepages, LowWatermarks lowWatermarks,
            Optional<String> growableMemory) {
        this.root = root;
        this.fromSysfs = fromSysfs;
        this.nodes = List.copyOf(nodes);
        this.system = system;
        this.systemHugePages = Map.copyOf(systemHugePages);
        this.nrHugepages = nrHugepages;
        this.lowWatermarks = lowWatermarks;
        this.growableMemory = growableMemory;
    }

    /** This machine's topology, from {@code /}. */
    public static Topology read() {
        return read(Path.of("/"));
    }

    /** The topology described by {@code root/sys/...} and {@code root/proc/...}. */
    public static Topology read(Path root) {
        return read(root, Posix.pageSize());
    }

    /** As {@link #read(Path)}, counting {@code proc/zoneinfo}'s pages as {@code pageSize} bytes (the tests' fixtures). */
    static Topology read(Path root, long pageSize) {
        return new TopologyReader(root, pageSize).read();
    }

    /** Online nodes in ascending order. */
    public List<NumaNode> nodes() {
        return nodes;
    }

    public Optional<NumaNode> node(int id) {
        return nodes.stream().filter(n -> n.id() == id).findFirst();
    }

    public List<Integer> onlineNodes() {
        return nodes.stream().map(NumaNode::id).collect(Collectors.toUnmodifiableList());
    }

    public List<Integer> memoryNodes() {
        return nodes.stream().filter(NumaNode::hasMemory).map(NumaNode::id).collect(Collectors.toUnmodifiableList());
    }

    /** False when the machine has no {@code sys/devices/system/node}: one node 0 was made up. */
    public boolean fromSysfs() {
        return fromSysfs;
    }

    /** {@code proc/meminfo} (or, without it, the sum of the nodes). */
    public Meminfo system() {
        return system;
    }

    /** System-wide huge page pools ({@code sys/kernel/mm/hugepages}) by page size in bytes. */
    public Map<Long, HugePagePool> systemHugePages() {
        return systemHugePages;
    }

    /** Each node's low watermark from {@code proc/zoneinfo}, or why it is unknown. */
    LowWatermarks lowWatermarks() {
        return lowWatermarks;
    }

    /**
     * A device through which a virtual machine's host can add memory while it runs, e.g. "a virtio-balloon device
     * (virtio0)", from the drivers' bound devices under {@code sys/bus/virtio/drivers}; empty when there is none.
     * There, {@code MemTotal} and {@code MemFree} may be less than the memory the host gives as it is used.
     */
    public Optional<String> growableMemory() {
        return growableMemory;
    }

    /** {@code vm.nr_hugepages} (pages of the default huge page size), -1 when unknown. */
    public long nrHugepages() {
        return nrHugepages;
    }

    /** The node {@code id}, which must be online and have memory; otherwise a message saying which exist. */
    public NumaNode memoryNode(int id) {
        NumaNode node = node(id).orElseThrow(() -> new NumaException("NUMA node " + id
                + " does not exist; online nodes: " + CpuList.format(onlineNodes())));
        if (!node.hasMemory()) {
            throw new NumaException("NUMA node " + id + " has no memory (CPUs " + CpuList.format(node.cpus())
                    + " only); nodes with memory: " + CpuList.format(memoryNodes()));
        }
        return node;
    }

    /** SLIT distance from node {@code a} to node {@code b} (10 = local). */
    public int distance(int a, int b) {
        NumaNode from = node(a).orElseThrow(() -> new NumaException("NUMA node " + a + " does not exist"));
        Integer d = from.distances().get(b);
        if (d == null) {
            throw new NumaException("NUMA node " + b + " does not exist");
        }
        return d;
    }

    /** The node with memory closest to {@code from} (itself when it has memory; ties go to the lower id). */
    public int nearestMemoryNode(int from) {
        return nodes.stream().filter(NumaNode::hasMemory)
                .min(Comparator.comparingInt((NumaNode n) -> distance(from, n.id())).thenComparingInt(NumaNode::id))
                .map(NumaNode::id).orElseThrow(() -> new NumaException("no NUMA node has memory"));
    }

    /**
     * The node of a PCI device from {@code sys/bus/pci/devices/<id>/numa_node}; empty when the kernel
     * does not know it (-1, common in VMs) or the device is not in sysfs.
     */
    public OptionalInt gpuNode(String pciBusId) {
        Path file = root.resolve("sys/bus/pci/devices").resolve(PciBusId.normalise(pciBusId)).resolve("numa_node");
        Optional<String> text = Sysfs.readIfExists(file);
        if (text.isEmpty()) {
            return OptionalInt.empty();
        }
        long node = Sysfs.parseLong(text.get(), file);
        return node < 0 ? OptionalInt.empty() : OptionalInt.of((int) node);
    }

    @Override
    public String toString() {
        return nodes.size() + (nodes.size() == 1 ? " NUMA node" : " NUMA nodes") + (fromSysfs ? "" : " (no NUMA sysfs)")
                + ": " + nodes.stream().map(NumaNode::toString).collect(Collectors.joining("; "));
    }
}
