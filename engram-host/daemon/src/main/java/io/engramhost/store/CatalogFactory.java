package io.engramhost.store;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.ContentIdentity;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.Selection;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaDevice;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.MemoryBudget;
import io.engramhost.numa.NumaException;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.numa.PolicySpec;
import io.engramhost.numa.Topology;
import io.engramhost.protocol.Backend;
import io.engramhost.seed.SeedSettings;
import io.engramhost.util.Bytes;
import io.engramhost.vmm.VmmSupport;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;
import java.util.Set;
import java.util.stream.IntStream;

/**
 * Turns a daemon's settings into the load it will run: opens and validates the checkpoint, selects
 * the tables, computes the fingerprint, checks the limits every message must respect, resolves the
 * NUMA policy, checks the GPUs and the memory budget, and picks the backend. Everything that can be
 * wrong with the input fails here, before the daemon takes its socket.
 */
public final class CatalogFactory {
    private static final System.Logger LOG = System.getLogger(CatalogFactory.class.getName());

    private CatalogFactory() {
    }

    /**
     * What a daemon will load: the tables, the selection that chose them and their content identity, their
     * fingerprint and the builder that loads them.
     */
    public record Prepared(Checkpoint checkpoint, List<TensorInfo> tensors, Selection selection,
            ContentIdentity identity, Fingerprint fingerprint, String placement, CatalogBuilder builder, String budget,
            int regionCount, Optional<String> spillWarning) {
    }

    /**
     * The fingerprint the tables {@code ctx} selects from the checkpoint on disk would have, computed as
     * {@link #prepare} does (the headers are read, the digest records beside them too, and the limits checked) but
     * without the placement, the GPUs or the memory budget: to tell whether tables kept elsewhere (systemd's fd
     * store) are still the checkpoint's.
     */
    public static Fingerprint fingerprintOnDisk(StoreSettings ctx) {
        try (OpenCheckpoint open = OpenCheckpoint.open(ctx.checkpoints())) {
            return Chosen.of(ctx, open.checkpoint()).fingerprint();
        }
    }

    /**
     * The host tables and the device tensors: the selection's tensors ({@link Selection#of}: {@code --tables}, else
     * the model's config.json, else every tensor) with the {@code --device-tensors} ones moved to the GPUs. Device
     * tensors the selection does not hold are served too, and their globs join the fingerprint's patterns (an
     * expectation names them with the same {@code --tables}).
     */
    private record Chosen(List<TensorInfo> host, List<TensorInfo> onGpu, Selection selection,
            ContentIdentity identity, Fingerprint fingerprint) {
        static Chosen of(StoreSettings ctx, Checkpoint checkpoint) {
            Selection selection = Selection.of(checkpoint, ctx.tables());
            List<TensorInfo> onGpu = ctx.deviceTensors().isEmpty() ? List.of() : checkpoint.select(ctx.deviceTensors());
            Set<String> gpuNames = new HashSet<>();
            onGpu.forEach(t -> gpuNames.add(t.name()));
            Set<String> selected = new HashSet<>();
            selection.tensors().forEach(t -> selected.add(t.name()));
            List<TensorInfo> served = new ArrayList<>(selection.tensors());
            List<String> patterns = new ArrayList<>(selection.patterns());
            List<TensorInfo> beyond = onGpu.stream().filter(t -> !selected.contains(t.name())).toList();
            if (!beyond.isEmpty()) {
                served.addAll(beyond);
                patterns.addAll(ctx.deviceTensors());
            }
            ContentIdentity identity = ContentIdentity.of(checkpoint, served);
            Fingerprint fingerprint = Fingerprint.of(checkpoint, served, patterns, identity,
                    ctx.backend().wireName(), Fingerprint.LAYOUT_VERSION);
            Limits.check(served, fingerprint);
            List<TensorInfo> host = served.stream().filter(t -> !gpuNames.contains(t.name())).toList();
            return new Chosen(host, onGpu, selection, identity, fingerprint);
        }
    }

    /**
     * Validates everything about {@code ctx} that can be wrong: the checkpoint (opened once; its fds go to
     * the builder, which reads through them and closes them), the selection, the limits
     * ({@link Limits}), the NUMA policy, the GPUs and the memory budget.
     */
    public static Prepared prepare(StoreSettings ctx) {
        OpenCheckpoint open;
        try {
            open = OpenCheckpoint.open(ctx.checkpoints());
        } catch (OutOfMemoryError e) {
            // The headers are parsed whole; a header with hundreds of thousands of tensors needs more than the
            // daemon's bounded heap although it is within the limits. Say so in one line rather than die of it.
            throw new CheckpointException("the checkpoint's headers do not fit in this daemon's heap (max "
                    + (Runtime.getRuntime().maxMemory() >> 20) + " MiB) while validating " + ctx.checkpoints()
                    + ": give serve a larger heap (ENGRAM_HOST_JVM_OPTS=-Xmx...) or serve a checkpoint with fewer"
                    + " tensors per file", e);
        }
        try {
            return prepare(ctx, open);
        } catch (RuntimeException | Error e) {
            try {
                open.close();
            } catch (RuntimeException suppressed) {
                e.addSuppressed(suppressed);
            }
            throw e;
        }
    }

    private static Prepared prepare(StoreSettings ctx, OpenCheckpoint open) {
        Checkpoint checkpoint = open.checkpoint();
        Chosen chosen = Chosen.of(ctx, checkpoint);
        List<TensorInfo> selected = chosen.host();
        List<TensorInfo> onGpu = chosen.onGpu();
        Fingerprint fingerprint = chosen.fingerprint();
        List<TensorInfo> all = new ArrayList<>(selected);
        all.addAll(onGpu);
        RecordCheck records = RecordCheck.of(checkpoint, all, chosen.identity());
        DeviceTensors device = onGpu.isEmpty() ? null : new DeviceTensors(onGpu, gpus(ctx), records);
        Topology topology = Topology.read();
        PolicySpec spec = PolicySpec.parse(ctx.numa() == null ? "auto" : ctx.numa());
        HostRegionFactory factory;
        String placement;
        NumaPolicy policy;
        switch (ctx.backend()) {
            case MEMFD, MEMFD_HUGETLB -> {
                PageKind pages = ctx.backend() == Backend.MEMFD ? PageKind.SMALL : PageKind.HUGE_2M;
                policy = spec.resolve(topology, spec.isAuto() ? served(gpuNodes(topology, ctx.hooks()), ctx.gpus()) : List.of());
                factory = HostRegionFactory.memfd(pages, policy);
                placement = "numa " + policy;
            }
            case CUDA_VMM -> {
                int gpu = ctx.device() != null ? ctx.device() : 0;
                CudaDevice d = cudaDevice(gpu, "--backend cuda-vmm");
                VmmSupport.check(d);
                int node = vmmNode(spec, topology, d);
                policy = NumaPolicy.bind(node);
                factory = HostRegionFactory.vmm(node, gpu, ctx.regionMax());
                placement = "HOST_NUMA node " + node + " (made in " + d.label() + "'s context)";
            }
            default -> throw new IllegalStateException("no store for backend " + ctx.backend());
        }
        HostCatalogBuilder builder = new HostCatalogBuilder(new LoadSettings(open, selected, fingerprint, records,
                factory, ctx.backend().wireName(), device, ctx.threads(), ctx.hooks(),
                seedSource(ctx, chosen.identity(), records, selected)));
        Limits.checkManifest(all, fingerprint, builder.regionCount());
        OptionalLong override = ctx.memoryBudget() == null ? OptionalLong.empty()
                : OptionalLong.of(ctx.memoryBudget());
        String budget = builder.plannedBytes() == 0 ? "no host memory needed"
                : MemoryBudget.check(builder.plannedBytes(), policy, ctx.backend() == Backend.MEMFD_HUGETLB,
                        factory.granule(), topology, override);
        if (builder.stagingBytes() > 0) { // ordinary memory anywhere, beside the tables, for the length of the seed
            long beside = ctx.backend() == Backend.MEMFD_HUGETLB ? 0 : builder.plannedBytes();
            try {
                budget += "; with --seed-staging " + Bytes.format(builder.stagingBytes()) + ": "
                        + MemoryBudget.check(beside + builder.stagingBytes(), NumaPolicy.none(), false,
                                factory.granule(), topology, override);
            } catch (NumaException e) {
                throw new NumaException("--seed-staging " + Bytes.format(builder.stagingBytes()) + " beside the "
                        + "tables: " + e.getMessage() + "; give a smaller --seed-staging, or none");
            }
        }
        // With --memory-budget the preferred node's free memory is one of the figures the operator overrules.
        Optional<String> spill = builder.plannedBytes() == 0 || ctx.backend() != Backend.MEMFD
                || override.isPresent() ? Optional.empty()
                : MemoryBudget.spill(builder.plannedBytes(), policy, topology);
        return new Prepared(checkpoint, all, chosen.selection(), chosen.identity(), fingerprint, placement, builder,
                budget, builder.regionCount(), spill);
    }

    /**
     * The peers the host tables may come from, or null: none asked for ({@code --seed-from}), or no table has a digest
     * to check a peer's bytes against, which is then said in one line (the load reads the disk).
     */
    private static SeedSettings seedSource(StoreSettings ctx, ContentIdentity identity, RecordCheck records,
            List<TensorInfo> host) {
        if (!ctx.seed().fromPeers()) {
            return null;
        }
        long covered = host.stream().filter(t -> records.expectedDigest(t) != null).count();
        if (covered == 0) {
            String why = identity.level() == ContentIdentity.Level.HF_SNAPSHOT
                    ? "its identity is a Hugging Face snapshot's whole-file SHA-256, which one table's bytes cannot be"
                            + " checked against"
                    : "it has no content identity";
            LOG.log(System.Logger.Level.WARNING, "seed: not seeding from " + ctx.seed().peers().size()
                    + (ctx.seed().peers().size() == 1 ? " peer" : " peers") + ": " + why + "; loading from the disk"
                    + " (write a digest record: engram-host inspect --write-digests " + ctx.checkpoints().get(0) + ")");
            return null;
        }
        return ctx.seed();
    }

    /** cuda-vmm needs one node: bind/preferred name it; auto is the GPU's HOST_NUMA_ID (0 when unknown). */
    private static int vmmNode(PolicySpec spec, Topology topology, CudaDevice d) {
        if (spec.isAuto()) {
            OptionalInt sysfs = topology.gpuNode(d.pciBusId());
            if (sysfs.isPresent()) {
                return sysfs.getAsInt();
            }
            return Math.max(d.hostNumaId(), 0);
        }
        NumaPolicy p = spec.resolve(topology, List.of());
        if (p instanceof NumaPolicy.OneNode one) {
            return one.node();
        }
        if (p == NumaPolicy.none()) {
            return 0;
        }
        throw new IllegalArgumentException("--numa " + spec + " cannot be used with --backend cuda-vmm: a HOST_NUMA"
                + " allocation lives on one node; use auto, N or preferred:N (or --backend memfd to interleave)");
    }

    private static CudaDevice cudaDevice(int ordinal, String forWhat) {
        if (!Cuda.available()) {
            throw new IllegalArgumentException(forWhat + " needs CUDA: " + Cuda.unavailabilityCause()
                    + "; use --backend memfd");
        }
        if (ordinal < 0 || ordinal >= Cuda.deviceCount()) {
            throw new IllegalArgumentException(forWhat + ": GPU " + ordinal + " does not exist; this machine has "
                    + Cuda.deviceCount());
        }
        return Cuda.device(ordinal);
    }

    private static List<Integer> gpus(StoreSettings ctx) {
        if (!Cuda.available()) {
            throw new IllegalArgumentException("--device-tensors needs CUDA: " + Cuda.unavailabilityCause());
        }
        List<Integer> gpus = ctx.gpus() != null ? ctx.gpus() : IntStream.range(0, Cuda.deviceCount()).boxed().toList();
        for (int g : gpus) {
            VmmSupport.checkDevice(cudaDevice(g, "--gpus"));
        }
        return gpus;
    }

    /**
     * The nodes of the GPUs this daemon serves, for --numa auto: {@code gpus} (--gpus) picks from {@code all} (every
     * GPU's node, by CUDA index); null: every GPU. A GPU that does not exist is an error naming the flag.
     */
    static List<OptionalInt> served(List<OptionalInt> all, List<Integer> gpus) {
        if (gpus == null) {
            return all;
        }
        List<OptionalInt> out = new ArrayList<>();
        for (int g : gpus) {
            if (g < 0 || g >= all.size()) {
                throw new IllegalArgumentException("--gpus: GPU " + g + " does not exist (this machine has "
                        + all.size() + (all.size() == 1 ? " GPU" : " GPUs") + ")");
            }
            out.add(all.get(g));
        }
        return out;
    }

    /**
     * Every GPU's node for --numa auto, by CUDA index (unless the hooks name them): sysfs first, CUDA's HOST_NUMA_ID
     * where sysfs says -1.
     */
    private static List<OptionalInt> gpuNodes(Topology topology, DaemonHooks hooks) {
        Optional<List<OptionalInt>> given = hooks.gpuNumaNodes();
        if (given.isPresent()) {
            return given.get();
        }
        List<OptionalInt> out = new ArrayList<>();
        if (Cuda.available()) {
            for (int i = 0; i < Cuda.deviceCount(); i++) {
                CudaDevice d = Cuda.device(i);
                OptionalInt n = topology.gpuNode(d.pciBusId());
                out.add(n.isPresent() ? n : d.hostNumaId() >= 0 ? OptionalInt.of(d.hostNumaId()) : OptionalInt.empty());
            }
            return out;
        }
        return GpuNodes.nodes(topology, Path.of("/"));
    }
}
