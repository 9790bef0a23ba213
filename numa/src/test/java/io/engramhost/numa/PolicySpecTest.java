package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.OptionalInt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PolicySpecTest {
    private static final List<OptionalInt> NO_GPUS = List.of();

    @Test
    void shouldParseEveryForm() {
        Topology t = Fixtures.topology(Fixtures.TWO_SOCKET);
        assertTrue(PolicySpec.parse("auto").isAuto());
        assertEquals(NumaPolicy.none(), PolicySpec.parse("none").resolve(t, NO_GPUS));
        assertEquals(NumaPolicy.bind(1), PolicySpec.parse("1").resolve(t, NO_GPUS));
        assertEquals(NumaPolicy.preferred(0), PolicySpec.parse(" Preferred:0 ").resolve(t, NO_GPUS));
        assertEquals(NumaPolicy.interleave(List.of(0, 1)), PolicySpec.parse("interleave").resolve(t, NO_GPUS));
        assertEquals(NumaPolicy.interleave(List.of(1)), PolicySpec.parse("interleave:1").resolve(t, NO_GPUS));
        assertFalse(PolicySpec.parse("0").isAuto());
        assertEquals("preferred:0", NumaPolicy.preferred(0).toString());
        assertEquals("interleave:0-1", PolicySpec.parse("interleave").resolve(t, NO_GPUS).toString());
    }

    @Test
    void shouldListTheFormsForAnUnknownValue() {
        assertEquals("--numa: 'foo' is not one of auto, none, N, preferred:N, interleave",
                assertThrows(IllegalArgumentException.class, () -> PolicySpec.parse("foo")).getMessage());
        assertEquals("--numa: '' is not one of auto, none, N, preferred:N, interleave",
                assertThrows(IllegalArgumentException.class, () -> PolicySpec.parse("")).getMessage());
        assertEquals("--numa: 'preferred:x' is not valid: 'x' is not a NUMA node number (one of auto, none, N,"
                + " preferred:N, interleave)",
                assertThrows(IllegalArgumentException.class, () -> PolicySpec.parse("preferred:x")).getMessage());
        assertEquals("--numa: 'interleave:1-0' is not valid: '1-0' is not a list of NUMA nodes (e.g. 0-1 or 0,2)"
                + " (one of auto, none, N, preferred:N, interleave)",
                assertThrows(IllegalArgumentException.class, () -> PolicySpec.parse("interleave:1-0")).getMessage());
        assertThrows(IllegalArgumentException.class, () -> PolicySpec.parse("-1"));
        assertThrows(IllegalArgumentException.class, () -> PolicySpec.parse("2048"));
    }

    @Test
    void shouldRefuseANodeThatDoesNotExist() {
        Topology t = Fixtures.topology(Fixtures.TWO_SOCKET);
        assertEquals("NUMA node 3 does not exist; online nodes: 0-1",
                assertThrows(NumaException.class, () -> PolicySpec.parse("3").resolve(t, NO_GPUS)).getMessage());
        assertEquals("NUMA node 2 does not exist; online nodes: 0-1", assertThrows(NumaException.class,
                () -> PolicySpec.parse("interleave:0-2").resolve(t, NO_GPUS)).getMessage());
        Topology vm = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        assertEquals("NUMA node 1 does not exist; online nodes: 0",
                assertThrows(NumaException.class, () -> PolicySpec.parse("preferred:1").resolve(vm, NO_GPUS)).getMessage());
    }

    @Test
    void shouldRefuseANodeWithoutMemory() {
        Topology t = Fixtures.topology(Fixtures.MEMORYLESS);
        assertEquals("NUMA node 1 has no memory (CPUs 96-191,288-383 only); nodes with memory: 0",
                assertThrows(NumaException.class, () -> PolicySpec.parse("1").resolve(t, NO_GPUS)).getMessage());
        assertThrows(NumaException.class, () -> NumaPolicy.preferred(1).validate(t));
        assertEquals(NumaPolicy.interleave(List.of(0)), NumaPolicy.interleave().validate(t));
    }

    @Test
    void shouldBindAutoToTheNodeOfGpusThatAgree() {
        Topology t = Fixtures.topology(Fixtures.TWO_SOCKET);
        List<OptionalInt> socket1 = List.of(t.gpuNode("00000000:9A:00.0"), t.gpuNode("00000000:AB:00.0"),
                t.gpuNode("00000000:BA:00.0"), t.gpuNode("00000000:DB:00.0"));
        assertEquals(NumaPolicy.bind(1), PolicySpec.parse("auto").resolve(t, socket1));
        assertEquals(NumaPolicy.bind(0), PolicySpec.resolveAuto(t, List.of(t.gpuNode("0000:18:00.0"))));
    }

    @Test
    void shouldInterleaveAutoOverGpusOnDifferentNodes() {
        Topology t = Fixtures.topology(Fixtures.TWO_SOCKET);
        assertEquals(NumaPolicy.interleave(List.of(0, 1)), PolicySpec.resolveAuto(t,
                List.of(t.gpuNode("0000:18:00.0"), t.gpuNode("0000:db:00.0"))));
    }

    @Test
    void shouldBindAutoToTheNearestNodeWithMemoryForAGpuOnAMemorylessNode(@TempDir Path root) throws IOException {
        // Nodes 0 and 1 have memory; node 2 has CPUs and the GPU but no memory, and is nearer node 1.
        String[] distances = {"10 21 32", "21 10 12", "32 12 10"};
        for (int n = 0; n < 3; n++) {
            write(root, "node" + n + "/cpulist", n * 8 + "-" + (n * 8 + 7));
            write(root, "node" + n + "/meminfo", "Node " + n + " MemTotal: " + (n < 2 ? 1 << 20 : 0) + " kB\nNode " + n
                    + " MemFree: " + (n < 2 ? 1 << 19 : 0) + " kB\n");
            write(root, "node" + n + "/distance", distances[n]);
        }
        write(root, "online", "0-2");
        write(root, "has_memory", "0-1");
        Topology t = Topology.read(root);
        assertEquals(NumaPolicy.bind(1), PolicySpec.resolveAuto(t, List.of(OptionalInt.of(2), OptionalInt.of(2))));
        assertEquals(NumaPolicy.interleave(List.of(0, 1)),
                PolicySpec.resolveAuto(t, List.of(OptionalInt.of(0), OptionalInt.of(2))));
        Topology memoryless = Fixtures.topology(Fixtures.MEMORYLESS);
        assertEquals(NumaPolicy.none(), PolicySpec.resolveAuto(memoryless, List.of(memoryless.gpuNode("0000:c1:00.0"))),
                "one node holds all memory: nothing to choose");
    }

    private static void write(Path root, String rel, String text) throws IOException {
        Path p = root.resolve("sys/devices/system/node").resolve(rel);
        Files.createDirectories(p.getParent());
        Files.writeString(p, text + "\n");
    }

    @Test
    void shouldChooseNoneWhenAGpuNodeIsUnknownOrThereIsNothingToChoose() {
        Topology two = Fixtures.topology(Fixtures.TWO_SOCKET);
        assertEquals(NumaPolicy.none(), PolicySpec.resolveAuto(two, List.of(two.gpuNode("0000:18:00.0"), OptionalInt.empty())));
        assertEquals(NumaPolicy.none(), PolicySpec.resolveAuto(two, NO_GPUS));
        assertEquals(NumaPolicy.none(), PolicySpec.resolveAuto(two, List.of(OptionalInt.of(7))), "not an online node");
        Topology vm = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        assertEquals(NumaPolicy.none(), PolicySpec.parse("auto").resolve(vm, List.of(vm.gpuNode("00000000:00:06.0"))));
        Topology cxl = Fixtures.topology(Fixtures.CXL);
        assertEquals(NumaPolicy.bind(0), PolicySpec.resolveAuto(cxl, List.of(cxl.gpuNode("0000:4a:00.0"))),
                "a CXL node is a second memory node, but the GPU's own node is nearer");
    }
}
