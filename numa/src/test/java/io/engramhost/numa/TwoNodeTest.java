package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.testing.NoLeaks;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * This machine's own topology and placement on it. Everywhere: the topology read from {@code /} is consistent
 * (every online node has a distance to every other, 10 to itself). Inside the two-node guest of
 * scripts/numa/numa-vm.sh ({@code ENGRAM_NUMA_VM=1}, set by the script): there are exactly two nodes with memory and
 * CPUs, bind puts every page on the chosen node, interleave about half on each, preferred on the preferred node,
 * and the budget of a bind counts that node alone. Elsewhere the two-node tests are skipped, saying so.
 */
@Timeout(120)
@NoLeaks
class TwoNodeTest {
    private static final long PAGE = Posix.pageSize();
    private static final boolean IN_GUEST = "1".equals(System.getenv("ENGRAM_NUMA_VM"));

    private Topology topology;

    @BeforeEach
    void read() {
        topology = Topology.read();
    }

    @Test
    void shouldReadAConsistentTopologyOfThisMachine() {
        assertFalse(topology.nodes().isEmpty(), topology.toString());
        for (NumaNode a : topology.nodes()) {
            assertEquals(10, topology.distance(a.id(), a.id()), topology.toString());
            for (NumaNode b : topology.nodes()) {
                assertEquals(topology.distance(a.id(), b.id()), topology.distance(b.id(), a.id()), topology.toString());
            }
        }
        assertTrue(topology.system().totalBytes() > 0);
    }

    @Test
    void shouldSeeTwoNodesWithMemoryAndCpusInTheGuest() {
        requireGuest();
        assertEquals(List.of(0, 1), topology.onlineNodes(), topology.toString());
        assertEquals(List.of(0, 1), topology.memoryNodes(), topology.toString());
        for (NumaNode n : topology.nodes()) {
            assertFalse(n.cpus().isEmpty(), "node " + n.id() + " has no CPUs: " + topology);
            assertTrue(n.memory().totalBytes() > 256L << 20, "node " + n.id() + ": " + n.memory());
        }
        assertEquals(20, topology.distance(0, 1), "numa-vm.sh sets the distance 0-1 to 20");
        assertEquals(0, topology.nearestMemoryNode(0));
        assertEquals(1, topology.nearestMemoryNode(1));
    }

    @Test
    void shouldBindEveryPageToTheChosenNodeInTheGuest() {
        requireGuestNuma();
        for (int node : List.of(0, 1)) {
            PlacementReport r = placeMemfd(NumaPolicy.bind(node), 4096);
            assertTrue(r.allOn(node), "bind:" + node + ": " + r);
        }
    }

    @Test
    void shouldInterleaveAboutHalfOnEachNodeInTheGuest() {
        requireGuestNuma();
        PlacementReport r = placeMemfd(NumaPolicy.interleave().validate(topology), 4096);
        assertEquals(4096, r.pagesOn(0) + r.pagesOn(1), r.toString());
        assertTrue(Math.abs(r.fractionOn(0) - 0.5) < 0.05, "interleave: " + r);
    }

    @Test
    void shouldPreferNodeOneWhileItHasRoomInTheGuest() {
        requireGuestNuma();
        PlacementReport r = placeMemfd(NumaPolicy.preferred(1), 4096);
        assertTrue(r.allOn(1), "preferred:1: " + r);
    }

    @Test
    void shouldCountOnlyTheBoundNodeInTheBudgetInTheGuest() {
        requireGuest();
        long node1 = topology.node(1).orElseThrow().memory().availableBytes();
        long all = topology.node(0).orElseThrow().memory().availableBytes() + node1;
        long bytes = node1 + (all - node1) / 2; // more than node 1 has, less than both together
        NumaException e = assertThrows(NumaException.class,
                () -> MemoryBudget.check(bytes, NumaPolicy.bind(1), false, 0, topology));
        assertTrue(e.getMessage().startsWith("need ") && e.getMessage().contains(" on NUMA node 1 but only "),
                e.getMessage());
        assertTrue(e.getMessage().endsWith("--numa interleave spreads the tables over them"), e.getMessage());
        assertTrue(MemoryBudget.check(bytes, NumaPolicy.interleave(), false, 0, topology).contains("fits on NUMA nodes 0-1"));
        assertTrue(MemoryBudget.check(bytes, NumaPolicy.preferred(1), false, 0, topology)
                .contains("preferred node 1 has only"));
    }

    private void requireGuest() {
        Assumptions.assumeTrue(IN_GUEST,
                "not in the two-node guest of scripts/numa/numa-vm.sh (ENGRAM_NUMA_VM is not 1)");
    }

    private void requireGuestNuma() {
        requireGuest();
        Optional<String> cause = Numa.probe();
        Assumptions.assumeTrue(cause.isEmpty(), () -> "NUMA calls are forbidden here: " + cause.orElseThrow());
    }

    /** A fresh memfd of {@code pages} pages, the policy set before the first touch, touched, then where it is. */
    private static PlacementReport placeMemfd(NumaPolicy policy, int pages) {
        long len = pages * PAGE;
        try (Fd fd = Posix.memfdCreate("two-node", 0)) {
            Posix.ftruncate(fd, len);
            try (Mapping m = Posix.mmap(len, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
                Numa.apply(m, policy);
                NumaTest.touch(m.address(), len, PAGE);
                assertEquals(policy, Numa.policyAt(m.address()));
                return Placement.verify(m, PAGE);
            }
        }
    }
}
