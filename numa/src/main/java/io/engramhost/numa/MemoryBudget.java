package io.engramhost.numa;

import io.engramhost.util.Bytes;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * Refuses, before anything is allocated, a table that cannot fit where its policy puts it. Ordinary
 * memory counts as usable when it is free or reclaimable file cache ({@link Meminfo#availableBytes()}) above the low
 * watermark ({@code proc/zoneinfo}: below it the kernel reclaims, and a bind can meet the OOM killer) on the bound
 * node, on the interleaved nodes together, or on the whole machine for {@code none} and {@code preferred} (which
 * falls back to other nodes). Without {@code proc/zoneinfo} the watermark is not subtracted and the line says so. Hugetlb memory counts free pages of the pool.
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
        Usable usable = new Usable(mem, nodes.isEmpty() ? topology.lowWatermarks().total()
                : topology.lowWatermarks().sum(nodes), topology);
        if (bytes > usable.bytes()) {
            throw new NumaException("need " + Bytes.format(bytes) + " " + where + " but only "
                    + Bytes.format(usable.bytes()) + " is usable (" + usable.figures() + ")"
                    + interleaveHint(bytes, resolved, topology) + growableHint(topology));
        }
        String line = Bytes.format(bytes) + " fits " + where + ": " + Bytes.format(usable.bytes()) + " usable ("
                + usable.figures() + ")";
        return line + spill(bytes, resolved, topology).map(w -> "; " + w).orElse("");
    }

    /**
     * For {@code preferred:N} (ordinary pages) when node N alone has less than {@code bytes} usable (MemFree + file
     * cache above its low watermark, the only pages the kernel gives the preferred node before it turns to others): a
     * warning that the rest will come from other nodes; empty otherwise. The daemon logs it as a warning.
     */
    public static Optional<String> spill(long bytes, NumaPolicy policy, Topology topology) {
        if (policy instanceof NumaPolicy.Preferred p && !singleMemoryNode(topology, p.nodes())
                && topology.node(p.node()).isPresent()) {
            Usable onNode = usable(topology, p.node());
            if (bytes > onNode.bytes()) {
                return Optional.of("preferred node " + p.node() + " has only " + Bytes.format(onNode.bytes())
                        + " usable (" + onNode.figures() + "), the rest will come from other nodes");
            }
        }
        return Optional.empty();
    }

    /**
     * For a bind that does not fit its node: when the nodes with memory together have room, say so and suggest
     * {@code --numa interleave}; empty otherwise.
     */
    private static String interleaveHint(long bytes, NumaPolicy resolved, Topology topology) {
        if (!(resolved instanceof NumaPolicy.Bind) || topology.memoryNodes().size() < 2) {
            return "";
        }
        long all = topology.memoryNodes().stream().mapToLong(n -> usable(topology, n).bytes()).sum();
        if (bytes > all) {
            return "";
        }
        return "; NUMA nodes " + CpuList.format(topology.memoryNodes()) + " together have " + Bytes.format(all)
                + " usable: --numa interleave spreads the tables over them";
    }

    /**
     * On a virtual machine whose host can add memory while it runs: say so, and name the override. Only the
     * operator knows whether the host will give it; the check does not guess.
     */
    private static String growableHint(Topology topology) {
        return topology.growableMemory().map(d -> "; this machine has " + d + ", through which its host may add"
                + " memory as it is used: if it does, serve --memory-budget SIZE counts on SIZE instead").orElse("");
    }

    private static Usable usable(Topology topology, int node) {
        return new Usable(topology.node(node).orElseThrow().memory(), topology.lowWatermarks().sum(List.of(node)),
                topology);
    }

    /**
     * What the kernel will hand out without reclaiming: MemFree + file cache less the low watermark of the same
     * place, never below 0; without {@code proc/zoneinfo} MemFree + file cache, and {@link #figures()} says so.
     */
    private record Usable(Meminfo mem, long lowWatermark, Optional<String> unknown) {
        Usable(Meminfo mem, long lowWatermark, Topology topology) {
            this(mem, lowWatermark, topology.lowWatermarks().unknown());
        }

        long bytes() {
            return Math.max(0, mem.availableBytes() - (unknown.isPresent() ? 0 : lowWatermark));
        }

        String figures() {
            String sum = "MemFree " + Bytes.format(mem.freeBytes()) + " + file cache " + Bytes.format(mem.fileCacheBytes());
            return unknown.map(why -> sum + "; low watermark not subtracted: " + why)
                    .orElseGet(() -> sum + " - low watermark " + Bytes.format(lowWatermark));
        }
    }

    /** True when {@code nodes} is just the one node that has memory: use the system-wide figures. */
    private static boolean singleMemoryNode(Topology topology, List<Integer> nodes) {
        return topology.memoryNodes().size() == 1 && topology.memoryNodes().equals(nodes);
    }
}
