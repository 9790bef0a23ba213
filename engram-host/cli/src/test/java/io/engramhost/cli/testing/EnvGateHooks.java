package io.engramhost.cli.testing;

import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.hooks.DaemonHooks;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * TEST ONLY: the daemon hooks of the test launcher ({@code bin/engram-host-test}), driven by environment variables so
 * that a test (or an independent check) can hold a daemon process at a known point, kill it there or change its
 * checkpoint, and then let it go on. The shipped CLI has no such hooks and ignores these variables.
 * <ul>
 * <li>{@value #LOAD_GATE}, {@value #HANDOVER_GATE}, {@value #TAKEOVER_GATE}: {@code STEP:PATH} holds the load, the
 * predecessor's side of a takeover or the successor's at STEP (a {@link DaemonHooks.Point#step()} of that part:
 * {@code before-read}, {@code after-chunk}; {@code accepted}, {@code ready}, {@code committed}; {@code request},
 * {@code catalog}, {@code commit}) until PATH exists, saying so on stderr each time it holds;</li>
 * <li>{@value #GPU_NUMA_NODES}: a comma list of NUMA nodes (-1: unknown) that {@code --numa auto} takes for the GPUs'
 * (the two-node guest has no GPU), said once on stderr.</li>
 * </ul>
 */
public final class EnvGateHooks implements DaemonHooks {
    public static final String LOAD_GATE = "ENGRAM_HOST_TEST_LOAD_GATE";
    public static final String HANDOVER_GATE = "ENGRAM_HOST_TEST_HANDOVER_GATE";
    public static final String TAKEOVER_GATE = "ENGRAM_HOST_TEST_TAKEOVER_GATE";
    public static final String GPU_NUMA_NODES = "ENGRAM_HOST_TEST_GPU_NUMA_NODES";

    private final Map<String, String> env;
    private final AtomicBoolean nodesAnnounced = new AtomicBoolean();

    public EnvGateHooks(Map<String, String> env) {
        this.env = Map.copyOf(env);
    }

    private static String variable(Point point) {
        return switch (point.part()) {
            case "load" -> LOAD_GATE;
            case "handover" -> HANDOVER_GATE;
            default -> TAKEOVER_GATE;
        };
    }

    @Override
    public void reached(Point point) {
        String variable = variable(point);
        String gate = env.get(variable);
        if (gate == null || !gate.startsWith(point.step() + ":")) {
            return;
        }
        Path p = Path.of(gate.substring(point.step().length() + 1));
        if (Files.exists(p)) {
            return;
        }
        System.err.println("engram-host: TEST ONLY (" + variable + "=" + gate + "): " + point.part() + " held at '"
                + point.step() + "' until " + p + " exists");
        System.err.flush();
        while (!Files.exists(p)) {
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                if (point.part().equals("load")) {
                    throw new CheckpointException("load interrupted while held by " + LOAD_GATE);
                }
                throw new IllegalStateException(point.part() + " interrupted while held by " + variable);
            }
        }
    }

    @Override
    public Optional<List<OptionalInt>> gpuNumaNodes() {
        String given = env.get(GPU_NUMA_NODES);
        if (given == null) {
            return Optional.empty();
        }
        List<OptionalInt> out = new ArrayList<>();
        for (String part : given.split(",", -1)) {
            int n;
            try {
                n = Integer.parseInt(part.strip());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(GPU_NUMA_NODES + "='" + given
                        + "' is not a comma list of NUMA nodes (-1 for unknown)");
            }
            out.add(n < 0 ? OptionalInt.empty() : OptionalInt.of(n));
        }
        if (nodesAnnounced.compareAndSet(false, true)) {
            System.err.println("engram-host: TEST ONLY (" + GPU_NUMA_NODES + "=" + given + "): --numa auto takes the"
                    + " GPUs' NUMA nodes from this variable, not from the GPUs");
            System.err.flush();
        }
        return Optional.of(out);
    }
}
