package io.engramhost.numa;

import io.engramhost.os.Posix;
import io.engramhost.util.Bytes;
import java.util.ArrayList;
import java.util.List;

/** The hugetlb half of {@link MemoryBudget}: free pages of the right size, and how to reserve more. */
final class HugePageBudget {
    private HugePageBudget() {
    }

    /**
     * {@code nodes} empty: the system-wide pool; otherwise the pools of those nodes together. {@code note} ends the
     * line and the refusal ("" for none).
     */
    static String check(long bytes, long pageSize, List<Integer> nodes, String where, Topology topology, String note) {
        if (pageSize <= Posix.pageSize() || Long.bitCount(pageSize) != 1) {
            throw new IllegalArgumentException("memory budget: huge page size " + pageSize
                    + " is not a power of two larger than the base page size (" + Bytes.exact(Posix.pageSize()) + ")");
        }
        String size = Bytes.exact(pageSize);
        String dir = HugePagePool.dirName(pageSize);
        long need = (bytes + pageSize - 1) / pageSize;
        long free = 0;
        long total = 0;
        List<HugePagePool> pools = new ArrayList<>();
        if (nodes.isEmpty()) {
            HugePagePool pool = topology.systemHugePages().get(pageSize);
            if (pool == null) {
                throw new NumaException("this kernel offers no " + size + " huge pages (no sys/kernel/mm/hugepages/"
                        + dir + "); use ordinary pages or another huge page size");
            }
            pools.add(pool);
        } else {
            for (int n : nodes) {
                pools.add(topology.node(n).orElseThrow().hugePages(pageSize).orElseThrow(() -> new NumaException(
                        "NUMA node " + n + " offers no " + size + " huge pages (no sys/devices/system/node/node" + n
                                + "/hugepages/" + dir + ")")));
            }
        }
        for (HugePagePool p : pools) {
            free += p.free();
            total += p.total();
        }
        String pagesWhere = nodes.isEmpty() ? "" : " " + where;
        if (need <= free) {
            return need + " " + size + " huge pages fit" + pagesWhere + ": " + free + " free" + note;
        }
        throw new NumaException("need " + need + " free " + size + " huge pages" + pagesWhere + " but only " + free
                + (free == 1 ? " is" : " are") + " free (" + reserved(topology, pageSize, nodes, total)
                + "); reserve them with: " + howToReserve(topology, pageSize, nodes, pools, need - free)
                + (pageSize >= 1L << 30 ? " (or at boot: hugepagesz=1G hugepages=N, as 1 GiB pages rarely come free later)" : "")
                + note);
    }

    private static String reserved(Topology topology, long pageSize, List<Integer> nodes, long total) {
        if (nodes.isEmpty() && isDefaultSize(topology, pageSize) && topology.nrHugepages() >= 0) {
            return "vm.nr_hugepages=" + topology.nrHugepages();
        }
        if (nodes.isEmpty()) {
            return total + " reserved";
        }
        return nodes.size() == 1 ? "node " + nodes.get(0) + " has " + total + " reserved"
                : "nodes " + CpuList.format(nodes) + " have " + total + " reserved";
    }

    private static String howToReserve(Topology topology, long pageSize, List<Integer> nodes, List<HugePagePool> pools,
            long shortfall) {
        String dir = HugePagePool.dirName(pageSize);
        if (nodes.isEmpty()) {
            long target = pools.get(0).total() + shortfall;
            return isDefaultSize(topology, pageSize) ? "sysctl vm.nr_hugepages=" + target
                    : "echo " + target + " > /sys/kernel/mm/hugepages/" + dir + "/nr_hugepages";
        }
        long share = (shortfall + nodes.size() - 1) / nodes.size();
        List<String> commands = new ArrayList<>();
        for (int i = 0; i < nodes.size(); i++) {
            commands.add("echo " + (pools.get(i).total() + share) + " > /sys/devices/system/node/node" + nodes.get(i)
                    + "/hugepages/" + dir + "/nr_hugepages");
        }
        return String.join("; ", commands);
    }

    /** Whether vm.nr_hugepages reserves pages of this size: /proc/meminfo's Hugepagesize (2 MiB on x86-64, not always on aarch64). */
    private static boolean isDefaultSize(Topology topology, long pageSize) {
        return topology.system().defaultHugePageSize() == pageSize;
    }
}
