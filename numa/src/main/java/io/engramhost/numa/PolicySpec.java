package io.engramhost.numa;

import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.TreeSet;

/**
 * The {@code --numa} option: {@code auto}, {@code none}, {@code N} (bind), {@code preferred:N} or
 * {@code interleave} (every node with memory; {@code interleave:0-1} names the nodes). {@code auto}
 * is decided by {@link #resolve} from the nodes of the GPUs being served.
 */
public final class PolicySpec {
    private static final String FORMS = "auto, none, N, preferred:N, interleave";

    private final String text;
    private final NumaPolicy policy; // null for auto

    private PolicySpec(String text, NumaPolicy policy) {
        this.text = text;
        this.policy = policy;
    }

    /** Parses the option's value; an error names the option and lists the accepted forms. */
    public static PolicySpec parse(String value) {
        String v = value == null ? "" : value.strip().toLowerCase(Locale.ROOT);
        try {
            if (v.equals("auto")) {
                return new PolicySpec(v, null);
            }
            if (v.equals("none")) {
                return new PolicySpec(v, NumaPolicy.none());
            }
            if (v.equals("interleave")) {
                return new PolicySpec(v, NumaPolicy.interleave());
            }
            if (v.startsWith("interleave:")) {
                return new PolicySpec(v, NumaPolicy.interleave(nodeList(v.substring("interleave:".length()))));
            }
            if (v.startsWith("preferred:")) {
                return new PolicySpec(v, NumaPolicy.preferred(node(v.substring("preferred:".length()))));
            }
            if (!v.isEmpty() && v.chars().allMatch(Character::isDigit)) {
                return new PolicySpec(v, NumaPolicy.bind(node(v)));
            }
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--numa: '" + value + "' is not valid: " + e.getMessage()
                    + " (one of " + FORMS + ")", e);
        }
        throw new IllegalArgumentException("--numa: '" + value + "' is not one of " + FORMS);
    }

    public boolean isAuto() {
        return policy == null;
    }

    /**
     * The policy to apply on this machine: {@code auto} decided from {@code gpuNodes}, then every node
     * checked against {@code topology}.
     */
    public NumaPolicy resolve(Topology topology, List<OptionalInt> gpuNodes) {
        return (policy == null ? resolveAuto(topology, gpuNodes) : policy).validate(topology);
    }

    /**
     * {@code auto}: bind to the node nearest the GPUs when they all sit on one node, interleave over
     * their nodes when they differ, none when any GPU's node is unknown or there is only one node with
     * memory (nothing to choose, and no mbind that a container might forbid).
     */
    public static NumaPolicy resolveAuto(Topology topology, List<OptionalInt> gpuNodes) {
        if (gpuNodes.isEmpty() || gpuNodes.stream().anyMatch(OptionalInt::isEmpty)
                || topology.memoryNodes().size() < 2) {
            return NumaPolicy.none();
        }
        TreeSet<Integer> nodes = new TreeSet<>();
        for (OptionalInt gpu : gpuNodes) {
            int node = gpu.getAsInt();
            if (topology.node(node).isEmpty()) {
                return NumaPolicy.none(); // sysfs names a node that is not online: do not guess
            }
            nodes.add(topology.nearestMemoryNode(node));
        }
        return nodes.size() == 1 ? NumaPolicy.bind(nodes.first()) : NumaPolicy.interleave(List.copyOf(nodes));
    }

    private static List<Integer> nodeList(String s) {
        try {
            return CpuList.parse(s, Path.of("--numa"));
        } catch (NumaException e) {
            throw new IllegalArgumentException("'" + s + "' is not a list of NUMA nodes (e.g. 0-1 or 0,2)", e);
        }
    }

    private static int node(String s) {
        if (s.isEmpty() || s.length() > 4 || !s.chars().allMatch(Character::isDigit)) {
            throw new IllegalArgumentException("'" + s + "' is not a NUMA node number");
        }
        return Integer.parseInt(s);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof PolicySpec p && Objects.equals(policy, p.policy);
    }

    @Override
    public int hashCode() {
        return Objects.hashCode(policy);
    }

    @Override
    public String toString() {
        return text;
    }
}
