package io.engramhost.numa;

import io.engramhost.util.Bytes;
import java.util.List;

/**
 * Refuses, before anything is allocated, a table that cannot fit where its policy puts it. Ordinary
 * memory counts as available when it is free or reclaimable file cache ({@link Meminfo#availableBytes()})
 * on the bound node, on the interleaved nodes together, or on the whole machine for {@code none} and
 * {@code preferred} (which falls back to other nodes). Hugetlb memory counts free pages of the pool.
 * Where one node holds all the memory, the system-wide figures are used: some VMs report far less
 * in {@code node0/meminfo} than in {@code /proc/meminfo}.
 */
public final class MemoryBudget {
    private MemoryBudget() {
    }

    /**
     * Throws {@link NumaException} with both numbers when {@code bytes} do not fit; returns a line
     * saying what was checked otherwise. {@code hugePageSize} is used only when {@code hugetlb}.
     */
    public static String check(long bytes, NumaPolicy policy, boolean hugetlb, long hugePageSize, Topology topology) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("memory budget: size must be positive, was " + bytes);
        }
        NumaPolicy resolved = policy.validate(topology);
        boolean local = resolved instanceof NumaPolicy.Bind || resolved instanceof NumaPolicy.Interleave;
        List<Integer> nodes = local && !singleMemoryNode(topology, resolved.nodes()) ? resolved.nodes() : List.of();
        String where = nodes.isEmpty() ? "on this machine" : nodes.size() == 1 ? "on NUMA node " + nodes.get(0)
                : "on NUMA nodes " + CpuList.format(nodes);
        if (hugetlb) {
            return HugePageBudget.check(bytes, hugePageSize, nodes, where, topology);
        }
        Meminfo mem = nodes.isEmpty() ? topology.system() : nodes.stream().map(n -> topology.node(n).orElseThrow().memory())
                .reduce(Meminfo::plus).orElseThrow();
        if (bytes > mem.availableBytes()) {
            throw new NumaException("need " + Bytes.format(bytes) + " " + where + " but only "
                    + Bytes.format(mem.availableBytes()) + " is free (MemFree " + Bytes.format(mem.freeBytes())
                    + " + file cache " + Bytes.format(mem.fileCacheBytes()) + ")");
        }
        String line = Bytes.format(bytes) + " fits " + where + ": " + Bytes.format(mem.availableBytes())
                + " free (MemFree + file cache)";
        if (resolved instanceof NumaPolicy.Preferred p && !singleMemoryNode(topology, p.nodes())) {
            long onNode = topology.node(p.node()).orElseThrow().memory().availableBytes();
            if (bytes > onNode) {
                line += "; preferred node " + p.node() + " has only " + Bytes.format(onNode)
                        + " free, the rest will come from other nodes";
            }
        }
        return line;
    }

    /** True when {@code nodes} is just the one node that has memory: use the system-wide figures. */
    private static boolean singleMemoryNode(Topology topology, List<Integer> nodes) {
        return topology.memoryNodes().size() == 1 && topology.memoryNodes().equals(nodes);
    }
}
