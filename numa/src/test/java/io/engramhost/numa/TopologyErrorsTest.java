package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TopologyErrorsTest {
    private static final String MEMINFO = "Node 0 MemTotal: 1024 kB\nNode 0 MemFree: 512 kB\n";

    @TempDir
    Path root;
    private Path node;

    @BeforeEach
    void writeOneNode() throws IOException {
        node = root.resolve("sys/devices/system/node");
        write("sys/devices/system/node/online", "0\n");
        write("sys/devices/system/node/node0/cpulist", "0-3\n");
        write("sys/devices/system/node/node0/meminfo", MEMINFO);
        write("sys/devices/system/node/node0/distance", "10\n");
    }

    @Test
    void shouldReadTheMinimalTree() {
        Topology t = Topology.read(root);
        assertEquals(1024 * 1024, t.system().totalBytes(), "without proc/meminfo the nodes are summed");
        assertEquals(-1, t.nrHugepages());
    }

    @Test
    void shouldNameMalformedCpuList() throws IOException {
        write("sys/devices/system/node/node0/cpulist", "0-3,x\n");
        assertEquals(node.resolve("node0/cpulist") + ": malformed CPU/node list '0-3,x': 'x' is not a number"
                + " (expected e.g. 0-3,8-11)", assertThrows(NumaException.class, () -> Topology.read(root)).getMessage());
    }

    @Test
    void shouldNameDistanceRowOfWrongLength() throws IOException {
        write("sys/devices/system/node/node0/distance", "10 21\n");
        assertEquals(node.resolve("node0/distance") + ": 2 distances for 1 online nodes (0)",
                assertThrows(NumaException.class, () -> Topology.read(root)).getMessage());
    }

    @Test
    void shouldNameMissingAndMalformedMeminfo() throws IOException {
        Files.delete(node.resolve("node0/meminfo"));
        assertEquals(node.resolve("node0/meminfo") + ": missing",
                assertThrows(NumaException.class, () -> Topology.read(root)).getMessage());
        write("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: 1024 kB\n");
        assertEquals(node.resolve("node0/meminfo") + ": no MemFree line",
                assertThrows(NumaException.class, () -> Topology.read(root)).getMessage());
        write("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n");
        assertEquals(node.resolve("node0/meminfo") + ": 'lots' is not a number",
                assertThrows(NumaException.class, () -> Topology.read(root)).getMessage());
    }

    @Test
    void shouldNameMalformedHugePageCount() throws IOException {
        write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "many\n");
        write("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "0\n");
        assertEquals(root.resolve("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages") + ": 'many' is not a number",
                assertThrows(NumaException.class, () -> Topology.read(root)).getMessage());
    }

    @Test
    void shouldNameMalformedGpuNode() throws IOException {
        write("sys/bus/pci/devices/0000:1b:00.0/numa_node", "zero\n");
        Topology t = Topology.read(root);
        assertEquals(root.resolve("sys/bus/pci/devices/0000:1b:00.0/numa_node") + ": 'zero' is not a number",
                assertThrows(NumaException.class, () -> t.gpuNode("00000000:1B:00.0")).getMessage());
    }

    @Test
    void shouldSayWhenNothingDescribesMemory() throws IOException {
        Path empty = root.resolve("empty");
        Files.createDirectories(empty);
        assertEquals("neither " + empty.resolve("sys/devices/system/node") + " nor " + empty.resolve("proc/meminfo")
                + " exists: cannot tell how much memory there is",
                assertThrows(NumaException.class, () -> Topology.read(empty)).getMessage());
    }

    private void write(String rel, String text) throws IOException {
        Path p = root.resolve(rel);
        Files.createDirectories(p.getParent());
        Files.writeString(p, text);
    }
}
