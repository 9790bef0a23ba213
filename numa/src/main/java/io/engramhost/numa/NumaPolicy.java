package io.engramhost.numa;

import java.util.List;
import java.util.TreeSet;

/**
 * Where the pages of a mapping may go: the kernel's memory policy modes engram-host uses. Build one
 * with the factories, then {@link #validate(Topology)} it before applying it with {@link Numa}.
 */
public sealed interface NumaPolicy {
    int MPOL_DEFAULT = 0;
    int MPOL_PREFERRED = 1;
    int MPOL_BIND = 2;
    int MPOL_INTERLEAVE = 3;

    /** No policy: the process default (usually the node of the CPU that first touches a page). */
    static NumaPolicy none() {
        return None.INSTANCE;
    }

    /** Pages only on {@code node}; allocation fails rather than spill elsewhere. */
    static NumaPolicy bind(int node) {
        return new Bind(node);
    }

    /** Pages on {@code node} while it has free memory, elsewhere after. */
    static NumaPolicy preferred(int node) {
        return new Preferred(node);
    }

    /** Pages round-robin over every node with memory (resolved by {@link #validate(Topology)}). */
    static NumaPolicy interleave() {
        return new Interleave(List.of());
    }

    /** Pages round-robin over {@code nodes}. */
    static NumaPolicy interleave(List<Integer> nodes) {
        if (nodes.isEmpty()) {
            throw new IllegalArgumentException("interleave needs at least one node");
        }
        return new Interleave(nodes);
    }

    /** The kernel's mode number for mbind. */
    int mode();

    /** The nodes of the nodemask, ascending; empty for none and for interleave-over-all before validation. */
    List<Integer> nodes();

    /**
     * Checks every node against {@code topology} (it must exist and have memory) and returns the
     * policy to apply: interleave over all becomes interleave over the nodes with memory.
     */
    NumaPolicy validate(Topology topology);

    /** No policy. */
    enum None implements NumaPolicy {
        INSTANCE;

        @Override
        public int mode() {
            return MPOL_DEFAULT;
        }

        @Override
        public List<Integer> nodes() {
            return List.of();
        }

        @Override
        public NumaPolicy validate(Topology topology) {
            return this;
        }

        @Override
        public String toString() {
            return "none";
        }
    }

    /** A policy naming one node: bind or preferred. */
    sealed interface OneNode extends NumaPolicy permits Bind, Preferred {
        int node();

        @Override
        default List<Integer> nodes() {
            return List.of(node());
        }

        @Override
        default NumaPolicy validate(Topology topology) {
            topology.memoryNode(node());
            return this;
        }
    }

    /** MPOL_BIND to one node. */
    record Bind(int node) implements OneNode {
        public Bind {
            checkId(node);
        }

        @Override
        public int mode() {
            return MPOL_BIND;
        }

        @Override
        public String toString() {
            return "bind:" + node;
        }
    }

    /** MPOL_PREFERRED for one node. */
    record Preferred(int node) implements OneNode {
        public Preferred {
            checkId(node);
        }

        @Override
        public int mode() {
            return MPOL_PREFERRED;
        }

        @Override
        public String toString() {
            return "preferred:" + node;
        }
    }

    /** MPOL_INTERLEAVE over a set of nodes; an empty set means every node with memory. */
    record Interleave(List<Integer> nodes) implements NumaPolicy {
        public Interleave {
            nodes.forEach(NumaPolicy::checkId);
            nodes = List.copyOf(new TreeSet<>(nodes));
        }

        @Override
        public int mode() {
            return MPOL_INTERLEAVE;
        }

        @Override
        public NumaPolicy validate(Topology topology) {
            if (nodes.isEmpty()) {
                if (topology.memoryNodes().isEmpty()) {
                    throw new NumaException("cannot interleave: no NUMA node has memory");
                }
                return new Interleave(topology.memoryNodes());
            }
            nodes.forEach(topology::memoryNode);
            return this;
        }

        @Override
        public String toString() {
            return nodes.isEmpty() ? "interleave" : "interleave:" + CpuList.format(nodes);
        }
    }

    private static void checkId(int node) {
        if (node < 0 || node >= 1024) {
            throw new IllegalArgumentException("NUMA node " + node + " is out of range 0-1023");
        }
    }
}
