package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

class MemoryBudgetTest {
    private static final long GIB = 1L << 30;
    private static final long MB2 = 2L << 20;
    private static final long GB1 = 1L << 30;
    /** Both Engram tables of DeepSeek-V4.1-Flash. */
    private static final long TABLES = 189 * GIB;

    private final Topology twoSocket = Fixtures.topology(Fixtures.TWO_SOCKET);

    @Test
    void shouldRefuseATableThatDoesNotFitOnTheBoundNode() {
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(TABLES, NumaPolicy.bind(1), false, 0, twoSocket));
        assertEquals("need 189.0 GiB on NUMA node 1 but only 119.2 GiB is usable (MemFree 110.0 GiB + file cache"
                + " 10.3 GiB - low watermark 1.1 GiB); NUMA nodes 0-1 together have 1.1 TiB usable: --numa interleave"
                + " spreads the tables over them", e.getMessage());
    }

    @Test
    void shouldRefuseABindThatFitsOnlyInTheNodesLowWatermark() {
        // node 1: 120.3 GiB MemFree + file cache, of which its low watermark (292000 pages, 1.1 GiB) is not handed out
        long low = 292000L * 4096;
        long freeAndCache = twoSocket.node(1).orElseThrow().memory().availableBytes();
        assertEquals(low, twoSocket.lowWatermarks().bytes().get(1));
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(freeAndCache - low + 1, NumaPolicy.bind(1), false, 0, twoSocket));
        assertTrue(e.getMessage().startsWith("need 119.2 GiB on NUMA node 1 but only 119.2 GiB is usable (MemFree"
                + " 110.0 GiB + file cache 10.3 GiB - low watermark 1.1 GiB); NUMA nodes 0-1"), e.getMessage());
        assertEquals("119.2 GiB fits on NUMA node 1: 119.2 GiB usable (MemFree 110.0 GiB + file cache 10.3 GiB - low"
                + " watermark 1.1 GiB)", MemoryBudget.check(freeAndCache - low, NumaPolicy.bind(1), false, 0, twoSocket));
    }

    @Test
    void shouldSubtractTheInterleavedNodesWatermarksTogether() {
        long all = twoSocket.nodes().stream().mapToLong(n -> n.memory().availableBytes()).sum();
        long low = (291208L + 292000L) * 4096;
        assertEquals("1.1 TiB fits on NUMA nodes 0-1: 1.1 TiB usable (MemFree 1.0 TiB + file cache 33.5 GiB - low"
                + " watermark 2.2 GiB)", MemoryBudget.check(all - low, NumaPolicy.interleave(), false, 0, twoSocket));
        assertThrows(NumaException.class,
                () -> MemoryBudget.check(all - low + 1, NumaPolicy.interleave(), false, 0, twoSocket));
    }

    @Test
    void shouldAcceptWhatFitsAndSayWhatWasChecked() {
        assertEquals("189.0 GiB fits on NUMA node 0: 978.9 GiB usable (MemFree 956.8 GiB + file cache 23.2 GiB - low"
                + " watermark 1.1 GiB)", MemoryBudget.check(TABLES, NumaPolicy.bind(0), false, 0, twoSocket));
        assertEquals("189.0 GiB fits on NUMA nodes 0-1: 1.1 TiB usable (MemFree 1.0 TiB + file cache 33.5 GiB - low"
                + " watermark 2.2 GiB)", MemoryBudget.check(TABLES, NumaPolicy.interleave(), false, 0, twoSocket));
        assertEquals("189.0 GiB fits on this machine: 1.1 TiB usable (MemFree 1.0 TiB + file cache 33.5 GiB - low"
                + " watermark 2.2 GiB); preferred node 1 has only 119.2 GiB usable (MemFree 110.0 GiB + file cache"
                + " 10.3 GiB - low watermark 1.1 GiB), the rest will come from other nodes",
                MemoryBudget.check(TABLES, NumaPolicy.preferred(1), false, 0, twoSocket));
        // the spill warning counts node 1 above its watermark: what fits in MemFree + file cache alone spills too
        long freeAndCache = twoSocket.node(1).orElseThrow().memory().availableBytes();
        assertTrue(MemoryBudget.spill(freeAndCache, NumaPolicy.preferred(1), twoSocket).isPresent());
        assertEquals(Optional.empty(), MemoryBudget.spill(freeAndCache - 292000L * 4096, NumaPolicy.preferred(1),
                twoSocket));
    }

    @Test
    void shouldSumTheSystemForNoPolicy() {
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(2000 * GIB, NumaPolicy.none(), false, 0, twoSocket));
        assertEquals("need 2.0 TiB on this machine but only 1.1 TiB is usable (MemFree 1.0 TiB + file cache 33.5 GiB -"
                + " low watermark 2.2 GiB)", e.getMessage());
    }

    @Test
    void shouldUseSystemFiguresWhenOneNodeHoldsAllMemory() {
        Topology vm = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        // node0/meminfo of this VM says 4.3 GiB; proc/meminfo says 125.9 GiB and is right.
        // it has no proc/zoneinfo: the watermark is not subtracted, and the line says so rather than failing
        String zoneinfo = Fixtures.root(Fixtures.SINGLE_NODE_VM).resolve("proc/zoneinfo").toString();
        assertEquals("16.0 GiB fits on this machine: 125.6 GiB usable (MemFree 124.7 GiB + file cache 929.6 MiB; low"
                + " watermark not subtracted: " + zoneinfo + " is missing)",
                MemoryBudget.check(16 * GIB, NumaPolicy.bind(0), false, 0, vm));
        assertEquals("need 200.0 GiB on this machine but only 125.6 GiB is usable (MemFree 124.7 GiB + file cache"
                + " 929.6 MiB; low watermark not subtracted: " + zoneinfo + " is missing)", assertThrows(
                        NumaException.class, () -> MemoryBudget.check(200 * GIB, NumaPolicy.none(), false, 0, vm))
                        .getMessage());
    }

    @Test
    void shouldRefuseANodeWithoutMemoryBeforeCounting() {
        Topology t = Fixtures.topology(Fixtures.MEMORYLESS);
        assertEquals("NUMA node 1 has no memory (CPUs 96-191,288-383 only); nodes with memory: 0",
                assertThrows(NumaException.class, () -> MemoryBudget.check(GIB, NumaPolicy.bind(1), false, 0, t))
                        .getMessage());
    }

    @Test
    void shouldSayHowToReserveMissingHugePages() {
        Topology vm = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(2 * GIB, NumaPolicy.none(), true, MB2, vm));
        assertEquals("need 1024 free 2 MiB huge pages but only 0 are free (vm.nr_hugepages=0); reserve them with:"
                + " sysctl vm.nr_hugepages=1024", e.getMessage());
    }

    @Test
    void shouldReserveThroughNrHugepagesOnlyPagesOfTheDefaultSize() {
        Topology grace = Fixtures.topology(Fixtures.GRACE_64K);
        assertEquals(512L << 20, grace.system().defaultHugePageSize());
        NumaException dflt = assertThrows(NumaException.class,
                () -> MemoryBudget.check(2 * GIB, NumaPolicy.none(), true, 512L << 20, grace));
        assertEquals("need 4 free 512 MiB huge pages but only 0 are free (vm.nr_hugepages=0); reserve them with:"
                + " sysctl vm.nr_hugepages=4", dflt.getMessage());
        NumaException small = assertThrows(NumaException.class,
                () -> MemoryBudget.check(2 * GIB, NumaPolicy.none(), true, MB2, grace));
        assertEquals("need 1024 free 2 MiB huge pages but only 0 are free (0 reserved); reserve them with:"
                + " echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", small.getMessage());
    }

    @Test
    void shouldCountHugePagesOfTheBoundNode() {
        assertEquals("1000 2 MiB huge pages fit on NUMA node 0: 1000 free",
                MemoryBudget.check(2000 * (1L << 20), NumaPolicy.bind(0), true, MB2, twoSocket));
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(4 * GIB, NumaPolicy.bind(0), true, MB2, twoSocket));
        assertEquals("need 2048 free 2 MiB huge pages on NUMA node 0 but only 1000 are free (node 0 has 1024"
                + " reserved); reserve them with: echo 2072 > /sys/devices/system/node/node0/hugepages/"
                + "hugepages-2048kB/nr_hugepages", e.getMessage());
        NumaException oneGig = assertThrows(NumaException.class,
                () -> MemoryBudget.check(TABLES, NumaPolicy.bind(1), true, GB1, twoSocket));
        assertEquals("need 189 free 1 GiB huge pages on NUMA node 1 but only 4 are free (node 1 has 4 reserved);"
                + " reserve them with: echo 189 > /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/"
                + "nr_hugepages (or at boot: hugepagesz=1G hugepages=N, as 1 GiB pages rarely come free later)",
                oneGig.getMessage());
    }

    @Test
    void shouldSplitTheShortfallOverInterleavedNodes() {
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(8 * GIB, NumaPolicy.interleave(List.of(0, 1)), true, MB2, twoSocket));
        assertEquals("need 4096 free 2 MiB huge pages on NUMA nodes 0-1 but only 2024 are free (nodes 0-1 have 2048"
                + " reserved); reserve them with: echo 2060 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/"
                + "nr_hugepages; echo 2060 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
                e.getMessage());
    }

    @Test
    void shouldSayWhenTheKernelHasNoPagesOfThatSize() {
        Topology t = Fixtures.topology(Fixtures.NO_NUMA);
        assertEquals("this kernel offers no 1 GiB huge pages (no sys/kernel/mm/hugepages/hugepages-1048576kB); use"
                + " ordinary pages or another huge page size", assertThrows(NumaException.class,
                        () -> MemoryBudget.check(GIB, NumaPolicy.none(), true, GB1, t)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> MemoryBudget.check(GIB, NumaPolicy.none(), true, 4096, t));
        assertThrows(IllegalArgumentException.class, () -> MemoryBudget.check(0, NumaPolicy.none(), false, 0, t));
    }

    @Test
    void shouldCompareWithTheOverrideInsteadOfWhatIsFreeWhereverTheTablesGo() {
        // node 1 has 120.3 GiB free: the override says 200 GiB will be there (memory that appears as it is used)
        assertEquals("189.0 GiB fits the --memory-budget of 200.0 GiB on NUMA node 1 (MemFree + file cache now"
                + " 120.3 GiB)", MemoryBudget.check(TABLES, NumaPolicy.bind(1), false, 0, twoSocket,
                        OptionalLong.of(200 * GIB)));
        assertEquals("189.0 GiB fits the --memory-budget of 189.0 GiB on NUMA nodes 0-1 (MemFree + file cache now"
                + " 1.1 TiB)", MemoryBudget.check(TABLES, NumaPolicy.interleave(), false, 0, twoSocket,
                        OptionalLong.of(TABLES)));
        // preferred counts the whole machine; the preferred node's figure is what the override overrules: no spill line
        assertEquals("189.0 GiB fits the --memory-budget of 1.0 TiB on this machine (MemFree + file cache now 1.1 TiB)",
                MemoryBudget.check(TABLES, NumaPolicy.preferred(1), false, 0, twoSocket, OptionalLong.of(1024 * GIB)));
    }

    @Test
    void shouldRefuseWhatTheOverrideCannotHoldEvenWhenMoreIsFree() {
        NumaException e = assertThrows(NumaException.class, () -> MemoryBudget.check(TABLES, NumaPolicy.bind(0), false,
                0, twoSocket, OptionalLong.of(100 * GIB)));
        assertEquals("need 189.0 GiB on NUMA node 0 but --memory-budget gives only 100.0 GiB (MemFree + file cache now"
                + " 980.0 GiB)", e.getMessage());
        assertEquals("189.0 GiB fits the --memory-budget of 189.0 GiB on NUMA node 0 (MemFree + file cache now"
                + " 980.0 GiB)", MemoryBudget.check(TABLES, NumaPolicy.bind(0), false, 0, twoSocket,
                        OptionalLong.of(TABLES)));
        assertThrows(NumaException.class, () -> MemoryBudget.check(TABLES, NumaPolicy.bind(0), false, 0, twoSocket,
                OptionalLong.of(TABLES - 1)));
    }

    @Test
    void shouldNameTheOverrideWhereTheHostCanAddMemory(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp)
            throws Exception {
        // the H200 VM's fixture, plus a driver folder as sysfs has it: the device's entry, named virtio*
        java.nio.file.Path root = tmp.resolve("vm");
        java.nio.file.Path from = Fixtures.root(Fixtures.SINGLE_NODE_VM);
        try (java.util.stream.Stream<java.nio.file.Path> all = java.nio.file.Files.walk(from)) {
            for (java.nio.file.Path f : (Iterable<java.nio.file.Path>) all::iterator) {
                java.nio.file.Path to = root.resolve(from.relativize(f).toString());
                if (java.nio.file.Files.isDirectory(f)) {
                    java.nio.file.Files.createDirectories(to);
                } else {
                    java.nio.file.Files.copy(f, to);
                }
            }
        }
        java.nio.file.Path drivers = root.resolve("sys/bus/virtio/drivers");
        java.nio.file.Files.createDirectories(drivers.resolve("virtio_mem")); // the driver, no device bound
        java.nio.file.Files.createDirectories(drivers.resolve("virtio_balloon/virtio0"));
        java.nio.file.Files.createFile(drivers.resolve("virtio_balloon/bind")); // the driver's own files stay out
        Topology vm = Topology.read(root, 4096);
        assertEquals(Optional.of("a virtio-balloon device (virtio0)"), vm.growableMemory());
        String zoneinfo = root.resolve("proc/zoneinfo").toString();
        assertEquals("need 200.0 GiB on this machine but only 125.6 GiB is usable (MemFree 124.7 GiB + file cache"
                + " 929.6 MiB; low watermark not subtracted: " + zoneinfo + " is missing); this machine has a"
                + " virtio-balloon device (virtio0), through which its host may add memory as it is used: if it does,"
                + " serve --memory-budget SIZE counts on SIZE instead", assertThrows(NumaException.class,
                        () -> MemoryBudget.check(200 * GIB, NumaPolicy.none(), false, 0, vm)).getMessage());
        // what fits says nothing of it; a virtio-mem device is named before a balloon
        assertEquals("16.0 GiB fits on this machine: 125.6 GiB usable (MemFree 124.7 GiB + file cache 929.6 MiB; low"
                + " watermark not subtracted: " + zoneinfo + " is missing)",
                MemoryBudget.check(16 * GIB, NumaPolicy.none(), false, 0, vm));
        java.nio.file.Files.createDirectories(drivers.resolve("virtio_mem/virtio4"));
        assertEquals(Optional.of("a virtio-mem device (virtio4)"), Topology.read(root, 4096).growableMemory());
        // the fixtures without those folders (every other test here) have none
        assertEquals(Optional.empty(), Fixtures.topology(Fixtures.SINGLE_NODE_VM).growableMemory());
    }

    @Test
    void shouldLetTheOverrideExceedWhatASingleNodeMachineHasNow() {
        // the H200 machine on a start whose memory grows: proc/meminfo says 125.6 GiB available, 200 GiB is asked
        Topology vm = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        assertThrows(NumaException.class, () -> MemoryBudget.check(200 * GIB, NumaPolicy.none(), false, 0, vm));
        assertEquals("200.0 GiB fits the --memory-budget of 240.0 GiB on this machine (MemFree + file cache now"
                + " 125.6 GiB)", MemoryBudget.check(200 * GIB, NumaPolicy.bind(0), false, 0, vm,
                        OptionalLong.of(240 * GIB)));
        assertEquals("need 200.0 GiB on this machine but --memory-budget gives only 120.0 GiB (MemFree + file cache"
                + " now 125.6 GiB)", assertThrows(NumaException.class, () -> MemoryBudget.check(200 * GIB,
                        NumaPolicy.none(), false, 0, vm, OptionalLong.of(120 * GIB))).getMessage());
    }

    @Test
    void shouldCheckHugePagesAsWithoutTheOverrideAndSaySo() {
        Topology vm = Fixtures.topology(Fixtures.SINGLE_NODE_VM);
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(2 * GIB, NumaPolicy.none(), true, MB2, vm, OptionalLong.of(100 * GIB)));
        assertEquals("need 1024 free 2 MiB huge pages but only 0 are free (vm.nr_hugepages=0); reserve them with:"
                + " sysctl vm.nr_hugepages=1024; --memory-budget applies to ordinary pages only: huge pages must be"
                + " reserved before serve", e.getMessage());
        assertEquals("1000 2 MiB huge pages fit on NUMA node 0: 1000 free; --memory-budget applies to ordinary pages"
                + " only: huge pages must be reserved before serve", MemoryBudget.check(2000 * (1L << 20),
                        NumaPolicy.bind(0), true, MB2, twoSocket, OptionalLong.of(1)));
    }

    @Test
    void shouldRefuseAnOverrideThatIsNotPositiveAndANodeWithoutMemoryFirst() {
        assertThrows(IllegalArgumentException.class,
                () -> MemoryBudget.check(GIB, NumaPolicy.none(), false, 0, twoSocket, OptionalLong.of(0)));
        assertThrows(IllegalArgumentException.class,
                () -> MemoryBudget.check(GIB, NumaPolicy.none(), false, 0, twoSocket, OptionalLong.of(-GIB)));
        Topology t = Fixtures.topology(Fixtures.MEMORYLESS);
        assertEquals("NUMA node 1 has no memory (CPUs 96-191,288-383 only); nodes with memory: 0",
                assertThrows(NumaException.class, () -> MemoryBudget.check(GIB, NumaPolicy.bind(1), false, 0, t,
                        OptionalLong.of(1024 * GIB))).getMessage());
    }
}
