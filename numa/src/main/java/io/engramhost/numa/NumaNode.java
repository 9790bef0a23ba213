package io.engramhost.numa;

import io.engramhost.util.Bytes;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * One online NUMA node as sysfs describes it.
 *
 * @param id the node number
 * @param cpus its CPUs ({@code nodeN/cpulist}); empty for a memory-only node such as CXL memory
 * @param hasMemory whether the node is in {@code has_memory}
 * @param memory its {@code nodeN/meminfo}
 * @param distances SLIT distance to every online node, keyed by node ({@code nodeN/distance})
 * @param hugePages its huge page pools by page size in bytes
 */
public record NumaNode(int id, List<Integer> cpus, boolean hasMemory, Meminfo memory,
        Map<Integer, Integer> distances, Map<Long, HugePagePool> hugePages) {

    public NumaNode {
        cpus = List.copyOf(cpus);
        distances = Map.copyOf(distances);
        hugePages = Map.copyOf(hugePages);
    }

    public boolean hasCpus() {
        return !cpus.isEmpty();
    }

    /** The pool of {@code pageSize}-byte huge pages, empty when the kernel has none of that size. */
    public Optional<HugePagePool> hugePages(long pageSize) {
        return Optional.ofNullable(hugePages.get(pageSize));
    }

    @Override
    public String toString() {
        return "node" + id + " cpus=" + (cpus.isEmpty() ? "none" : CpuList.format(cpus))
                + (hasMemory ? " memory=" + Bytes.format(memory.totalBytes()) + " (available "
                        + Bytes.format(memory.availableBytes()) + ")" : " memory=none");
    }
}
