package io.engramhost.store;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.daemon.CatalogBuilder;
import io.engramhost.daemon.DaemonContext;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.numa.PolicySpec;
import io.engramhost.numa.Topology;
import java.nio.file.Path;
import java.util.List;
import java.util.OptionalInt;

/**
 * Turns a daemon's settings into the load it will run: opens and validates the checkpoint, selects
 * the tables, computes the fingerprint, resolves the NUMA policy and picks the backend. Everything
 * that can be wrong with the input fails here, before the daemon takes its socket.
 */
public final class CatalogFactory {
    /** Version of the table layout the fingerprint describes; bump when the served layout changes. */
    public static final int LAYOUT_VERSION = 1;

    private CatalogFactory() {
    }

    /** What a daemon will load: the tables, their fingerprint and the builder that loads them. */
    public record Prepared(Checkpoint checkpoint, List<TensorInfo> tensors, Fingerprint fingerprint, NumaPolicy policy,
            CatalogBuilder builder, String budget) {
    }

    public static Prepared prepare(DaemonContext ctx) {
        Checkpoint checkpoint = Checkpoint.open(ctx.checkpoints());
        List<TensorInfo> tensors = checkpoint.select(ctx.tables());
        Fingerprint fingerprint = Fingerprint.of(checkpoint, ctx.tables(), ctx.backend(), LAYOUT_VERSION);
        Topology topology = Topology.read();
        NumaPolicy policy = resolvePolicy(ctx.numa(), topology);
        return switch (ctx.backend()) {
            case "memfd", "memfd-hugetlb" -> {
                MemfdCatalogBuilder b = new MemfdCatalogBuilder(tensors, fingerprint,
                        ctx.backend().equals("memfd") ? PageKind.SMALL : PageKind.HUGE_2M, policy, topology, ctx.threads());
                yield new Prepared(checkpoint, tensors, fingerprint, policy, b, b.checkBudget());
            }
            default -> throw new IllegalArgumentException("--backend " + ctx.backend() + " is not available in this build");
        };
    }

    /** --numa: auto resolves from the GPUs' nodes (sysfs); none when unknown. */
    static NumaPolicy resolvePolicy(String spec, Topology topology) {
        PolicySpec parsed = PolicySpec.parse(spec == null ? "auto" : spec);
        List<OptionalInt> gpuNodes = parsed.isAuto() ? GpuNodes.nodes(topology, Path.of("/")) : List.of();
        return parsed.resolve(topology, gpuNodes);
    }
}
