package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import org.junit.jupiter.api.Test;

class TopologyTest {
    private static final long KB = 1024;
    private static final long MB2 = 2L << 20;
    private static final long GB1 = 1L << 30;

    @Test
    void shouldReadTwoSocketHostWithEightGpus() {
        Topology t = Fixtures.topology(Fixtures.TWO_SOCKET);
        assertTrue(t.fromSysfs());
        assertEquals(List.of(0, 1), t.onlineNodes());
        assertEquals(List.of(0, 1), t.memoryNodes());
        NumaNode n0 = t.node(0).orElseThrow();
        NumaNode n1 = t.node(1).orElseThrow();
        assertEquals("0-55,112-167", CpuList.format(n0.cpus()));
        assertEquals(112, n1.cpus().size());
        assertEquals("56-111,168-223", CpuList.format(n1.cpus()));
        assertEquals(1056545128 * KB, n0.memory().totalBytes());
        assertEquals(115343360 * KB, n1.memory().freeBytes());
        assertEquals((5242880 + 5557453) * KB, n1.memory().fileCacheBytes());
        assertEquals(Map.of(0, 10, 1, 21), n0.distances());
        assertEquals(21, t.distance(1, 0));
        assertEquals(new HugePagePool(MB2, 1024, 1000), n0.hugePages(MB2).orElseThrow());
        assertEquals(new HugePagePool(GB1, 4, 4), n1.hugePages(GB1).orElseThrow());
        assertEquals(new HugePagePool(MB2, 2048, 2024), t.systemHugePages().get(MB2));
        assertEquals(2048, t.nrHugepages());
        assertEquals(MB2, t.system().defaultHugePageSize());
        assertEquals(n0.memory().totalBytes() + n1.memory().totalBytes(), t.system().totalBytes());
        for (String gpu : List.of("0000:18:00.0", "0000:2a:00.0", "00000000:3A:00.0", "0000:5d:00.0")) {
            assertEquals(OptionalInt.of(0), t.gpuNode(gpu), gpu);
        }
        for (String gpu : List.of("00000000:9A:00.0", "0000:ab:00.0", "0000:BA:00.0", "db:00.0")) {
            assertEquals(OptionalInt.of(1), t.gpuNode(gpu), gpu);
        }
        assertEquals(OptionalInt.empty(), t.gpuNode("0000:c1:00.0"), "a device not in sysfs is unknown");
    }

    @Test
    void shouldReadSingleNodeVmWhoseGpuNodeIsUnknown() {
        Topology t = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        assertEquals(List.of(0), t.memoryNodes());
        NumaNode n0 = t.node(0).orElseThrow();
        assertEquals("0-15", CpuList.format(n0.cpus()));
        assertEquals(Map.of(0, 10), n0.distances());
        assertEquals(4550128 * KB, n0.memory().totalBytes());
        assertEquals(131981020 * KB, t.system().totalBytes(), "the VM's node meminfo and proc/meminfo disagree");
        assertEquals(new HugePagePool(MB2, 0, 0), n0.hugePages(MB2).orElseThrow());
        assertEquals(new HugePagePool(GB1, 0, 0), t.systemHugePages().get(GB1));
        assertEquals(0, t.nrHugepages());
        assertEquals(OptionalInt.empty(), t.gpuNode("00000000:00:06.0"), "numa_node -1 is unknown");
    }

    @Test
    void shouldReadMemoryOnlyCxlNode() {
        Topology t = Fixtures.topology(Fixtures.CXL);
        NumaNode cxl = t.node(1).orElseThrow();
        assertTrue(cxl.hasMemory());
        assertFalse(cxl.hasCpus());
        assertEquals(134217728 * KB, cxl.memory().totalBytes());
        assertEquals(14, t.distance(0, 1));
        assertEquals(List.of(0, 1), t.memoryNodes());
        assertEquals(OptionalInt.of(0), t.gpuNode("00000000:4A:00.0"));
        assertEquals(0, t.nearestMemoryNode(0));
    }

    @Test
    void shouldReadNodeWithCpusButNoMemory() {
        Topology t = Fixtures.topology(Fixtures.MEMORYLESS);
        NumaNode n1 = t.node(1).orElseThrow();
        assertFalse(n1.hasMemory());
        assertEquals(192, n1.cpus().size());
        assertEquals(0, n1.memory().totalBytes());
        assertEquals(List.of(0), t.memoryNodes());
        assertEquals(0, t.nearestMemoryNode(1));
        assertEquals(32, t.distance(1, 0));
        assertEquals(OptionalInt.of(1), t.gpuNode("0000:c1:00.0"));
    }

    @Test
    void shouldMakeOneNodeWithAllMemoryWithoutNumaSysfs() {
        Topology t = Fixtures.topology(Fixtures.NO_NUMA);
        assertFalse(t.fromSysfs());
        assertEquals(List.of(0), t.onlineNodes());
        NumaNode n0 = t.node(0).orElseThrow();
        assertEquals(65842148 * KB, n0.memory().totalBytes());
        assertEquals(t.system(), n0.memory());
        assertEquals((812340 + 1533108) * KB, n0.memory().fileCacheBytes());
        assertEquals("0-7", CpuList.format(n0.cpus()));
        assertEquals(new HugePagePool(MB2, 0, 0), n0.hugePages(MB2).orElseThrow());
        assertTrue(n0.hugePages(GB1).isEmpty());
        assertEquals(OptionalInt.empty(), t.gpuNode("0000:01:00.0"));
        assertTrue(t.toString().startsWith("1 NUMA node (no NUMA sysfs): node0 cpus=0-7 memory=62.8 GiB"), t.toString());
    }

    @Test
    void shouldReadThisMachine() {
        Topology t = Topology.read();
        assertFalse(t.memoryNodes().isEmpty(), t.toString());
        assertTrue(t.system().totalBytes() > 0);
        for (NumaNode n : t.nodes()) {
            assertEquals(10, t.distance(n.id(), n.id()), "local distance of " + n);
        }
    }
}
