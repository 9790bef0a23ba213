package io.engramhost.daemon;

import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Backend;
import io.engramhost.util.Bytes;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.seed.SeedSettings;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.StoreSettings;
import java.net.InetAddress;
import java.nio.file.Path;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * A daemon's settings: set what differs from the defaults, then {@link #conclude()} checks them all once, fills the
 * defaults and freezes them (a setter called after that throws). The CLI's {@code serve} only fills one of these;
 * tests and benchmarks fill their own. Every error names the flag it comes from.
 */
public final class DaemonContext {
    /** Threads a load uses by default, at most: the CPUs this process may use, up to this. */
    public static final int MAX_DEFAULT_THREADS = 16;

    private List<Path> checkpoints = List.of();
    private CatalogBuilder catalog;
    private List<String> tables = List.of();
    private Backend backend = Backend.MEMFD;
    private String numa = "auto";
    private Path socket;
    private String instance;
    private Integer device;
    private Set<Integer> allowUids = Set.of();
    private int threads;
    private ConnectionLimits limits = ConnectionLimits.defaults();
    private List<String> deviceTensors = List.of();
    private List<Integer> gpus;
    private Long memoryBudget;
    private Long regionMax;
    private boolean takeover;
    private boolean verifyDigests;
    private InetAddress metricsAddress;
    private int metricsPort;
    private SeedSettings seed = SeedSettings.NONE;
    private boolean logProgress = true;
    private boolean ownsProcess;
    private DaemonHooks hooks = DaemonHooks.NONE;
    private boolean concluded;

    private DaemonContext set() {
        if (concluded) {
            throw new IllegalStateException("the daemon's settings are concluded: they cannot change any more");
        }
        return this;
    }

    /** The checkpoint files, indexes or directories to load ({@code serve --checkpoint}). */
    public DaemonContext checkpoints(List<Path> paths) {
        set().checkpoints = List.copyOf(paths);
        return this;
    }

    /** Tables made elsewhere instead of a checkpoint (tests and benchmarks build them in memory). */
    public DaemonContext catalog(CatalogBuilder builder) {
        set().catalog = builder;
        return this;
    }

    /** Patterns of the tensors to serve ({@code --tables}; empty: all). */
    public DaemonContext tables(List<String> patterns) {
        set().tables = List.copyOf(patterns);
        return this;
    }

    public DaemonContext backend(Backend b) {
        set().backend = b;
        return this;
    }

    /** The NUMA policy ({@code --numa}: auto, none, N, preferred:N, interleave). */
    public DaemonContext numa(String policy) {
        set().numa = policy;
        return this;
    }

    /** The socket path, resolved ({@code --socket} and its placeholders are the CLI's). */
    public DaemonContext socket(Path path) {
        set().socket = path;
        return this;
    }

    public DaemonContext instance(String name) {
        set().instance = name;
        return this;
    }

    /** The GPU a cuda-vmm backend allocates in ({@code --device}; null: GPU 0). */
    public DaemonContext device(Integer ordinal) {
        set().device = ordinal;
        return this;
    }

    public DaemonContext allowUids(Set<Integer> uids) {
        set().allowUids = Set.copyOf(uids);
        return this;
    }

    /** The load's threads ({@code --threads}; 0: the CPUs this process may use, at most {@value #MAX_DEFAULT_THREADS}). */
    public DaemonContext threads(int n) {
        set().threads = n;
        return this;
    }

    public DaemonContext limits(ConnectionLimits l) {
        set().limits = Objects.requireNonNull(l, "limits");
        return this;
    }

    public DaemonContext deviceTensors(List<String> patterns) {
        set().deviceTensors = List.copyOf(patterns);
        return this;
    }

    /** The GPUs this daemon serves ({@code --gpus}; null: every GPU). */
    public DaemonContext gpus(List<Integer> ordinals) {
        set().gpus = ordinals == null ? null : List.copyOf(ordinals);
        return this;
    }

    /** {@code --memory-budget} in bytes (null: none). */
    public DaemonContext memoryBudget(Long bytes) {
        set().memoryBudget = bytes;
        return this;
    }

    /**
     * {@code --region-max} in bytes (null: {@link #DEFAULT_REGION_MAX} for cuda-vmm): the largest cuda-vmm host region;
     * a larger table lies in a run of regions of this size (docs/protocol.md). 0: one region per table.
     */
    public DaemonContext regionMax(Long bytes) {
        set().regionMax = bytes;
        return this;
    }

    /** {@code --region-max}'s default for cuda-vmm. */
    public static final long DEFAULT_REGION_MAX = 2L << 30;
    /** What {@code --region-max} must be a multiple of: the digest chunk, which is a multiple of CUDA's 2 MiB. */
    public static final long REGION_MAX_UNIT = 64L << 20;

    /** Take over from the daemon on the socket ({@code --takeover}), rehashing what it hands over when asked. */
    public DaemonContext takeover(boolean on, boolean verify) {
        set().takeover = on;
        this.verifyDigests = verify;
        return this;
    }

    /** Seeding: export on {@code --seed-listen}, fill from {@code --seed-from} ({@link SeedSettings#NONE}: neither). */
    public DaemonContext seed(SeedSettings s) {
        set().seed = Objects.requireNonNull(s, "seed");
        return this;
    }

    public SeedSettings seed() {
        return seed;
    }

    /** Serve /metrics, /ready and /live on {@code address:port} ({@code --metrics-port}; port 0: off). */
    public DaemonContext metrics(InetAddress address, int port) {
        set().metricsAddress = address;
        this.metricsPort = port;
        return this;
    }

    /** Whether the load logs its progress every few seconds (false: the caller draws it). */
    public DaemonContext logProgress(boolean on) {
        set().logProgress = on;
        return this;
    }

    /**
     * Whether the daemon is its process (the CLI's serve): SIGTERM and SIGINT stop it in order, and any thread that
     * dies of an error takes it down.
     */
    public DaemonContext ownsProcess(boolean on) {
        set().ownsProcess = on;
        return this;
    }

    public DaemonContext hooks(DaemonHooks h) {
        set().hooks = Objects.requireNonNull(h, "hooks");
        return this;
    }

    /** Checks every setting, fills the defaults, and freezes them; returns this. Errors name the flag. */
    public DaemonContext conclude() {
        if (concluded) {
            return this;
        }
        if (socket == null) {
            throw new IllegalArgumentException("--socket: the daemon needs a socket path");
        }
        if (checkpoints.isEmpty() && catalog == null) {
            throw new IllegalArgumentException("--checkpoint: at least one checkpoint path is needed");
        }
        if (backend == null) {
            throw new IllegalArgumentException("--backend: a backend is needed: one of "
                    + String.join(", ", Backend.wireNames()));
        }
        if (threads == 0) {
            threads = Math.min(MAX_DEFAULT_THREADS, Runtime.getRuntime().availableProcessors());
        }
        if (threads < 1 || threads > 1024) {
            throw new IllegalArgumentException("--threads: " + threads + " is not between 1 and 1024");
        }
        limits.check();
        for (int uid : allowUids) {
            if (uid < 0) {
                throw new IllegalArgumentException("--allow-uid: " + uid + " is not a uid");
            }
        }
        if (metricsPort < 0 || metricsPort > 65535) {
            throw new IllegalArgumentException("--metrics-port must be 0 (off) or 1-65535, got " + metricsPort);
        }
        if (metricsPort > 0 && metricsAddress == null) {
            throw new IllegalArgumentException("--metrics-address: an address is needed with --metrics-port");
        }
        if (regionMax != null && backend != Backend.CUDA_VMM) {
            throw new IllegalArgumentException("--region-max applies to --backend cuda-vmm only (a memfd region's"
                    + " pages come at the first write, so its creation is not waited for); remove it");
        }
        if (regionMax != null && (regionMax < 0 || regionMax % REGION_MAX_UNIT != 0)) {
            throw new IllegalArgumentException("--region-max " + Bytes.format(regionMax) + ": a multiple of 64 MiB"
                    + " (e.g. 2G), or 0 for one region per table");
        }
        if (verifyDigests && !takeover) {
            throw new IllegalArgumentException("--verify-digests needs --takeover");
        }
        concluded = true;
        return this;
    }

    /** What the store needs to prepare the load ({@code CatalogFactory.prepare}). */
    public StoreSettings store() {
        return new StoreSettings(checkpoints, tables, backend, numa, device, threads, deviceTensors, gpus, memoryBudget,
                hooks, seed, regionMax != null ? regionMax : backend == Backend.CUDA_VMM ? DEFAULT_REGION_MAX : 0);
    }

    public String instanceName() {
        return instance == null || instance.isBlank() ? SocketPaths.DEFAULT_INSTANCE : instance;
    }

    /** The daemon's own uid, root, and the listed ones. */
    public boolean admits(int uid) {
        return uid == Posix.geteuid() || uid == 0 || allowUids.contains(uid);
    }

    /** Only the daemon's own uid, or root, may stop it (or take it over). */
    public boolean mayStop(int uid) {
        return uid == Posix.geteuid() || uid == 0;
    }

    public List<Path> checkpoints() {
        return checkpoints;
    }

    /** Tables made elsewhere (null: the checkpoint's). */
    public CatalogBuilder catalog() {
        return catalog;
    }

    public Backend backend() {
        return backend;
    }

    public String numa() {
        return numa;
    }

    public Path socket() {
        return socket;
    }

    public Set<Integer> allowUids() {
        return allowUids;
    }

    public int threads() {
        return threads;
    }

    public ConnectionLimits limits() {
        return limits;
    }

    public Long memoryBudget() {
        return memoryBudget;
    }

    public boolean takeover() {
        return takeover;
    }

    public boolean verifyDigests() {
        return verifyDigests;
    }

    public InetAddress metricsAddress() {
        return metricsAddress;
    }

    public int metricsPort() {
        return metricsPort;
    }

    public boolean logProgress() {
        return logProgress;
    }

    public boolean ownsProcess() {
        return ownsProcess;
    }

    public DaemonHooks hooks() {
        return hooks;
    }
}
