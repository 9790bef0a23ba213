package io.engramhost.cli;

import io.engramhost.cli.log.LogFormat;
import io.engramhost.daemon.Daemon;
import io.engramhost.daemon.DaemonContext;
import io.engramhost.daemon.DaemonLauncher;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.DaemonState;
import io.engramhost.util.Bytes;
import io.engramhost.seed.SeedSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;
import picocli.CommandLine.TypeConversionException;

/** {@code serve}: the daemon, in the foreground. SIGTERM, SIGINT and {@code stop} end it cleanly. */
@Command(name = "serve", description = "Load tables from a checkpoint, keep them resident and serve them.")
final class ServeCommand implements Callable<Integer> {
    @Option(names = "--checkpoint", required = true, arity = "1..*", paramLabel = "PATH",
            description = "A .safetensors file, an index.json or a directory (repeatable).")
    List<Path> checkpoints;

    @Option(names = "--tables", split = ",", paramLabel = "GLOB", description = "Tensors to serve (default: the"
            + " engram.embed.weight and .scale tables of the layers the model's config.json names in engram_layer_ids;"
            + " without such a config.json, every tensor, with a warning; inspect shows what is selected).")
    List<String> tables = List.of();

    @Option(names = "--backend", defaultValue = "memfd", paramLabel = "NAME",
            converter = WireNameOptions.BackendConverter.class, completionCandidates = WireNameOptions.BackendNames.class,
            description = "One of ${COMPLETION-CANDIDATES} (default: ${DEFAULT-VALUE}).")
    Backend backend;

    @Option(names = "--numa", defaultValue = "auto", paramLabel = "POLICY",
            description = "auto, none, N, preferred:N or interleave (default: ${DEFAULT-VALUE}).")
    String numa;

    @Option(names = "--memory-budget", paramLabel = "SIZE", converter = SizeConverter.class,
            description = "Bytes of ordinary memory the tables may use where --numa puts them, checked instead of"
                    + " MemFree + file cache: for memory that appears as it is used. Bytes or a number with K, M, G, T"
                    + " (or KiB, MiB, GiB, TiB; powers of 1024): 120G, 512M. Not for huge pages (default: none).")
    Long memoryBudget;

    @Option(names = "--region-max", paramLabel = "SIZE", converter = SizeOrZeroConverter.class,
            description = "cuda-vmm only: a table larger than SIZE (a multiple of 64M) is made as a run of allocations"
                    + " of SIZE, so that each is filled, from the disk or a peer, while the next is created"
                    + " (cuMemCreate commits a few GiB/s); clients map a run back to back (docs/protocol.md)."
                    + " 0: one allocation per table (default: 2G).")
    Long regionMax;

    /** {@code --memory-budget}: {@link Bytes#parse}, refused as a usage error (exit 2) naming the option. */
    static final class SizeConverter implements ITypeConverter<Long> {
        @Override
        public Long convert(String value) {
            try {
                return Bytes.parse(value);
            } catch (IllegalArgumentException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    /** A size as {@link SizeConverter}, or 0 ({@code --region-max 0}, {@code --seed-staging 0}: none). */
    static final class SizeOrZeroConverter implements ITypeConverter<Long> {
        @Override
        public Long convert(String value) {
            return value.trim().matches("0+([KMGT](iB)?)?") ? 0L : new SizeConverter().convert(value);
        }
    }

    @Mixin
    SocketOptions socket;

    @Mixin
    LogOptions log;

    @Option(names = "--allow-uid", split = ",", paramLabel = "UID", description = "Other uids admitted (default: none).")
    List<Integer> allowUids = List.of();

    @Option(names = "--threads", defaultValue = "0", paramLabel = "N",
            description = "Threads that read the checkpoint, digest it and verify placement (default: the CPUs this"
                    + " process may use, at most 16).")
    int threads;

    @Option(names = "--max-connections", defaultValue = "4096", paramLabel = "N",
            description = "Connections of all peers together, leases included (default: ${DEFAULT-VALUE}).")
    int maxConnections;

    @Option(names = "--max-connections-per-uid", defaultValue = "1024", paramLabel = "N",
            description = "Connections of one uid, leases included (default: ${DEFAULT-VALUE}).")
    int maxPerUid;

    @Option(names = "--hello-timeout-ms", defaultValue = "5000", paramLabel = "MS",
            description = "From connect to a complete HELLO (default: ${DEFAULT-VALUE}).")
    int helloTimeoutMillis;

    @Option(names = "--request-timeout-ms", defaultValue = "10000", paramLabel = "MS",
            description = "From a request's first byte to its last, and for its answer to be taken (default: ${DEFAULT-VALUE}).")
    int requestTimeoutMillis;

    @Option(names = "--idle-timeout-ms", defaultValue = "60000", paramLabel = "MS",
            description = "A connection with no request under way and no lease (default: ${DEFAULT-VALUE}).")
    int idleTimeoutMillis;

    @Option(names = "--request-memory", defaultValue = "67108864", paramLabel = "BYTES",
            description = "Bytes of unfinished requests, all connections together (default: ${DEFAULT-VALUE}).")
    long requestMemory;

    @Option(names = "--workers", defaultValue = "4", paramLabel = "N",
            description = "Threads that answer complete requests (default: ${DEFAULT-VALUE}).")
    int workers;

    @Option(names = "--device-tensors", split = ",", paramLabel = "GLOB",
            description = "Tensors to place in GPU memory (cuda-vmm device allocations).")
    List<String> deviceTensors = List.of();

    @Option(names = "--gpus", split = ",", paramLabel = "N", description = "The GPUs this daemon serves (default: all): --device-tensors go to each,"
            + " and --numa auto places the host tables by their NUMA nodes.")
    List<Integer> gpus;

    @Option(names = "--metrics-port", defaultValue = "0", paramLabel = "PORT",
            description = "Serve /metrics (Prometheus), /ready and /live over HTTP on this TCP port; 0: off "
                    + "(default: ${DEFAULT-VALUE}).")
    int metricsPort;

    @Option(names = {"--metrics-address", "--metrics-bind"}, defaultValue = "127.0.0.1", paramLabel = "ADDR",
            description = "Address for --metrics-port; anything but loopback shows table names and sizes to that "
                    + "network (default: ${DEFAULT-VALUE}).")
    String metricsAddress;

    @Option(names = "--seed-listen", paramLabel = "ADDR:PORT",
            description = "Export the tables, read-only, to peers that hold --seed-key, on this address (an IP"
                    + " literal) and TCP port; off unless given (docs/seeding.md).")
    String seedListen;

    @Option(names = "--seed-from", split = ",", paramLabel = "HOST:PORT",
            description = "Fill the tables from these peers' daemons (their --seed-listen) instead of the disk; a"
                    + " name stands for every address it resolves to (a headless service). Needs a digest record;"
                    + " what no peer gives correctly is read from the disk.")
    List<String> seedFrom = List.of();

    @Option(names = "--seed-key", paramLabel = "FILE",
            description = "The key peers prove they share (32 to 4096 bytes, mode 0600): for --seed-listen and"
                    + " --seed-from.")
    Path seedKey;

    @Option(names = "--seed-tls-cert", paramLabel = "PEM",
            description = "Seed over TLS 1.3: this daemon's certificate (chain), signed by --seed-tls-ca; with"
                    + " --seed-tls-key and --seed-tls-ca, for --seed-listen and --seed-from alike.")
    Path seedTlsCert;

    @Option(names = "--seed-tls-key", paramLabel = "PEM",
            description = "The private key of --seed-tls-cert: unencrypted PKCS#8 PEM, mode 0600.")
    Path seedTlsKey;

    @Option(names = "--seed-tls-ca", paramLabel = "PEM",
            description = "The CA certificates every peer's certificate must chain to (a CA of the fleet's own).")
    Path seedTlsCa;

    @Option(names = "--seed-staging", paramLabel = "SIZE", converter = SizeOrZeroConverter.class,
            description = "With --seed-from: ordinary memory (e.g. 20G; sizes as --memory-budget) in which ranges"
                    + " that arrive before their region exists are held and checked, then copied into it; for"
                    + " cuda-vmm, whose regions are committed as they are created. Checked with the tables against"
                    + " the memory; freed when the seed ends (default: 0, none; docs/seeding.md).")
    Long seedStaging;

    @Option(names = "--takeover",
            description = "Take over from the daemon serving on this socket (an upgrade or restart without a reload):"
                    + " its tables, socket and leases move to this process, which then serves them; the old one exits."
                    + " With no daemon there, loads the checkpoint as plain serve does.")
    boolean takeover;

    @Option(names = "--verify-digests",
            description = "With --takeover: compute every table's digest again from the memory handed over before"
                    + " taking it (reads all of it once).")
    boolean verifyDigests;

    @Spec
    CommandSpec spec;

    @ParentCommand
    RootCommand root;

    @Override
    public Integer call() throws Exception {
        log.install();
        boolean drawsProgress = log.format == LogFormat.TEXT && ProgressLine.stderrIsTerminal();
        DaemonContext ctx = new DaemonContext().checkpoints(checkpoints).tables(tables).backend(backend).numa(numa)
                .socket(socket.resolve()).instance(socket.instance).device(socket.device)
                .allowUids(new HashSet<>(allowUids)).threads(threads)
                .limits(new ConnectionLimits(maxConnections, maxPerUid, helloTimeoutMillis, requestTimeoutMillis,
                        idleTimeoutMillis, requestMemory, workers))
                .deviceTensors(deviceTensors).gpus(gpus).memoryBudget(memoryBudget).regionMax(regionMax).takeover(takeover, verifyDigests)
                .metrics(metricsPort == 0 ? null : metricsAddress(metricsAddress), metricsPort)
                .seed(seedSettings())
                .logProgress(!drawsProgress).ownsProcess(true)
                .hooks(root == null ? DaemonHooks.NONE : root.hooks);
        try {
            ctx.conclude();
        } catch (IllegalArgumentException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
        try (Daemon daemon = DaemonLauncher.start(ctx, DaemonLauncher.Environment.current())) {
            try (ProgressLine live = drawsProgress && daemon.state() == DaemonState.LOADING
                    ? ProgressLine.forLoad(daemon.progress()) : null) {
                daemon.awaitReady();
            }
            daemon.awaitStop();
        } catch (Error e) {
            Thread.getDefaultUncaughtExceptionHandler().uncaughtException(Thread.currentThread(), e);
        }
        return 0;
    }

    /** The {@code --seed-*} options, checked together by {@link SeedSettings.Context#conclude}; a usage error names the flag. */
    private SeedSettings seedSettings() {
        try {
            return new SeedSettings.Context().listen(seedListen).from(seedFrom).key(seedKey)
                    .tls(seedTlsCert, seedTlsKey, seedTlsCa).staging(seedStaging).conclude();
        } catch (IllegalArgumentException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
    }

    /** A literal IP address (no name lookup: the daemon resolves nothing). */
    private InetAddress metricsAddress(String a) {
        String literal = a.startsWith("[") && a.endsWith("]") ? a.substring(1, a.length() - 1) : a;
        if (!literal.matches("[0-9.]+|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*")) {
            throw new ParameterException(spec.commandLine(), "--metrics-address must be an IP "
                    + "address such as 127.0.0.1, 0.0.0.0 or ::1, got '" + a + "'");
        }
        try {
            return InetAddress.getByName(literal);
        } catch (UnknownHostException e) {
            throw new ParameterException(spec.commandLine(), "--metrics-address: not an IP "
                    + "address: '" + a + "'");
        }
    }
}
