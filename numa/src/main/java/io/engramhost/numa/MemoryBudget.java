package io.engramhost.numa;

import io.engramhost.util.Bytes;
import java.util.List;
import java.util.OptionalLong;

/**
 * Refuses, before anything is allocated, a table that cannot fit where its policy puts it. Ordinary
 * memory counts as available when it is free or reclaimable file cache ({@link Meminfo#availableBytes()})
 * on the bound node, on the interleaved nodes together, or on the whole machine for {@code none} and
 * {@code preferred} (which falls back to other nodes). Hugetlb memory counts free pages of the pool.
 * Where one node holds all the memory, the system-wide figures are used: some VMs report far less
 * in {@code node0/meminfo} than in {@code /proc/meminfo}.
 *
 * <p>On a machine whose memory appears as it is used (MemTotal grows while memory is filled, as on some starts of
 * the project's two-GPU H200 machine), MemFree and the file cache say too little; the operator then states the
 * memory with {@code serve --memory-budget SIZE}, which replaces the available ordinary memory of where the policy
 * puts the tables (docs/operating.md, "Sizing"). It does not apply to huge pages: pages not reserved cannot
 * appear, so their pool is checked as without it.
 */
public final class MemoryBudget {
    private MemoryBudget() {
    }

    /**
     * Throws {@link NumaException} with both numbers when {@code bytes} do not fit; returns a line
     * saying what was checked otherwise. {@code hugePageSize} is used only when {@code hugetlb}.
     */
    public static String check(long bytes, NumaPolicy policy, boolean hugetlb, long hugePageSize, Topology topology) {
        return check(bytes, policy, hugetlb, hugePageSize, topology, OptionalLong.empty());
    }

    /**
     * As {@link #check(long, NumaPolicy, boolean, long, Topology)}, with the operator's {@code --memory-budget}
     * when present: for ordinary pages {@code bytes} are compared with it instead of MemFree + file cache of the bound
     * node, the interleaved nodes together or the whole machine (the figures are still read, and the line quotes
     * them); the hugetlb pool is checked as without it, and the line or the refusal says it was not used.
     */
    public static String check(long bytes, NumaPolicy policy, boolean hugetlb, long hugePageSize, Topology topology,
            OptionalLong budget) {
        if (bytes <= 0 || budget.orElse(1) <= 0) {
            throw new IllegalArgumentException("memory budget: size must be positive, was " + bytes
                    + (budget.isPresent() ? " (--memory-budget " + budget.getAsLong() + ")" : ""));
        }
        NumaPolicy resolved = policy.validate(topology);
        boolean local = resolved instanceof NumaPolicy.Bind || resolved instanceof NumaPolicy.Interleave;
        List<Integer> nodes = local && !singleMemoryNode(topology, resolved.nodes()) ? resolved.nodes() : List.of();
        String where = nodes.isEmpty() ? "on this machine" : nodes.size() == 1 ? "on NUMA node " + nodes.get(0)
                : "on NUMA nodes " + CpuList.format(nodes);
        if (hugetlb) {
            return HugePageBudget.check(bytes, hugePageSize, nodes, where, topology, budget.isEmpty() ? ""
                    : "; --memory-budget applies to ordinary pages only: huge pages must be reserved before serve");
        }
        Meminfo mem = nodes.isEmpty() ? topology.system() : nodes.stream().map(n -> topology.node(n).orElseThrow().memory())
                .reduce(Meminfo::plus).orElseThrow();
        if (budget.isPresent()) {
            String now = " (MemFree + file cache now " + Bytes.format(mem.availableBytes()) + ")";
            if (bytes > budget.getAsLong()) {
                throw new NumaException("need " + Bytes.format(bytes) + " " + where + " but --memory-budget gives only "
                        + Bytes.format(budget.getAsLong()) + now);
            }
            return Bytes.format(bytes) + " fits the --memory-budget of " + Bytes.format(budget.getAsLong()) + " " + where
                    + now;
        }
        if (bytes > mem.availableBytes()) {
            throw new NumaException("need " + Bytes.format(bytes) + " " + where + " but only "
                    + Bytes.format(mem.availableBytes()) + " is free (MemFree " + Bytes.format(mem.freeBytes())
                    + " + file cache " + Bytes.format(mem.fileCacheBytes()) + ")" + interleaveHint(bytes, resolved, topology));
        }
        String line = Bytes.format(bytes) + " fits " + where + ": " + Bytes.format(mem.availableBytes())
                + " free (MemFree + file cache)";
        return line + spill(bytes, resolved, topology).map(w -> "; " + w).orElse("");
    }

    /**
     * For {@code preferred:N} (ordinary pages) when node N alone has less than {@code bytes} free: a warning
     * that the rest will come from other nodes; empty otherwise. The daemon logs it as a warning.
     */
    public static java.util.Optional<String> spill(long bytes, NumaPolicy policy, Topology topology) {
        if (policy instanceof NumaPolicy.Preferred p && !singleMemoryNode(topology, p.nodes())
                && topology.node(p.node()).isPresent()) {
            long onNode = topology.node(p.node()).orElseThrow().memory().availableBytes();
            if (bytes > onNode) {
                return java.util.Optional.of("preferred node " + p.node() + " has only " + Bytes.format(onNode)
                        + " free, the rest will come from other nodes");
            }
        }
        return java.util.Optional.empty();
    }

    /**
     * For a bind that does not fit its node: when the nodes with memory together have room, say so and suggest
     * {@code --numa interleave}; empty otherwise.
     */
    private static String interleaveHint(long bytes, NumaPolicy resolved, Topology topology) {
        if (!(resolved instanceof NumaPolicy.Bind) || topology.memoryNodes().size() < 2) {
            return "";
        }
        long all = topology.memoryNodes().stream().mapToLong(n -> topology.node(n).orElseThrow().memory().availableBytes())
                .sum();
        if (bytes > all) {
            return "";
        }
        return "; NUMA nodes " + CpuList.format(topology.memoryNodes()) + " together have " + Bytes.format(all)
                + " free: --numa interleave spreads the tables over them";
    }

    /** True when {@code nodes} is just the one node that has memory: use the system-wide figures. */
    private static boolean singleMemoryNode(Topology topology, List<Integer> nodes) {
        return topology.memoryNodes().size() == 1 && topology.memoryNodes().equals(nodes);
    }
}
