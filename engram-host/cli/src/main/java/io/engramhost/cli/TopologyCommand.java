package io.engramhost.cli;

import io.engramhost.json.JsonWriter;
import io.engramhost.numa.CpuList;
import io.engramhost.numa.NumaNode;
import io.engramhost.numa.Topology;
import io.engramhost.util.Bytes;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code topology}: NUMA nodes, and each GPU with its PCI address, NUMA node and VMM capabilities. */
@Command(name = "topology", description = "Show NUMA nodes and GPUs (PCI address, NUMA node, VMM capabilities).")
final class TopologyCommand implements Callable<Integer> {
    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Override
    public Integer call() {
        Topology topology = Topology.read();
        List<Map<String, Object>> nodes = new ArrayList<>();
        for (NumaNode n : topology.nodes()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("id", n.id());
            m.put("cpus", CpuList.format(n.cpus()));
            m.put("has_memory", n.hasMemory());
            m.put("memory_total", n.memory().totalBytes());
            m.put("memory_free", n.memory().availableBytes());
            List<Object> distances = new ArrayList<>();
            for (NumaNode o : topology.nodes()) {
                distances.add(topology.distance(n.id(), o.id()));
            }
            m.put("distances", distances);
            n.hugePages(2L << 20).ifPresent(h -> m.put("hugepages_2m_free", h.free()));
            nodes.add(m);
        }
        List<Map<String, Object>> gpus = GpuInfo.describe(topology);
        if (json) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("nodes", nodes);
            out.put("nr_hugepages", topology.nrHugepages());
            out.put("growable_memory", topology.growableMemory().orElse(null));
            out.put("gpus", gpus);
            out.put("cuda", GpuInfo.cudaState());
            System.out.println(JsonWriter.write(out));
            return 0;
        }
        for (Map<String, Object> n : nodes) {
            System.out.printf("node %s: cpus %s, memory %s free of %s, distances %s%n", n.get("id"), n.get("cpus"),
                    Bytes.format((Long) n.get("memory_free")), Bytes.format((Long) n.get("memory_total")), n.get("distances"));
        }
        System.out.printf("huge pages reserved (vm.nr_hugepages): %d%n", topology.nrHugepages());
        topology.growableMemory().ifPresent(d -> System.out.printf("memory can grow: %s, through which the host may"
                + " add memory as it is used (serve --memory-budget)%n", d));
        System.out.printf("cuda: %s%n", GpuInfo.cudaState());
        if (gpus.isEmpty()) {
            System.out.println("gpus: none found");
        }
        for (Map<String, Object> g : gpus) {
            System.out.printf("gpu %s%n", g);
        }
        return 0;
    }
}
