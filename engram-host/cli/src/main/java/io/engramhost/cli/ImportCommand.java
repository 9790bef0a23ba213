package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.Expectations;
import io.engramhost.client.GpuVerify;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.Expectation;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import picocli.CommandLine;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.TypeConversionException;

/** {@code import}: what a restarting engine does: connect, check, map, optionally hash every table. */
@Command(name = "import", description = "Import the tables as an engine would, and report per-table rows and timings.")
final class ImportCommand implements Callable<Integer> {
    @Mixin
    SocketOptions socket;

    @Mixin
    DaemonTrustOptions trust;

    @Mixin
    ContentVerifyOptions content;

    static final class Expect {
        @Option(names = "--expect", paramLabel = "SHA256", converter = Sha256Converter.class,
                description = "Expected fingerprint (short form): the 64 hex digits of its SHA-256.")
        String sha;

        @Option(names = "--expect-checkpoint", arity = "1..*", paramLabel = "PATH",
                description = "Compute the expected fingerprint from this checkpoint.")
        List<Path> checkpoint;
    }

    /** {@code --expect}: 64 hex digits, or a usage error (exit 2) naming the option. */
    static final class Sha256Converter implements ITypeConverter<String> {
        @Override
        public String convert(String value) {
            if (!value.matches("[0-9a-fA-F]{64}")) {
                throw new TypeConversionException("--expect takes the 64 hex digits of a"
                        + " fingerprint's SHA-256 (engram-host status shows the daemon's), got '" + value + "'");
            }
            return value.toLowerCase(Locale.ROOT);
        }
    }

    @ArgGroup(exclusive = true)
    Expect expect;

    @Option(names = "--tables", split = ",", paramLabel = "GLOB",
            description = "With --expect-checkpoint: the tables the daemon was told to serve (default: as serve selects"
                    + " them: the model's config.json names the Engram tables, else every tensor).")
    List<String> tables = List.of();

    @Option(names = "--digest", paramLabel = "KIND", converter = WireNameOptions.DigestConverter.class,
            completionCandidates = WireNameOptions.DigestNames.class,
            description = "One of ${COMPLETION-CANDIDATES}. sha256: hash every table through the mapping; "
            + "engram: recompute the daemon's digest and fail on a difference.")
    DigestKind digest;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Option(names = "--wait-ms", defaultValue = "0", paramLabel = "MS",
            description = "Keep retrying this long while the daemon is loading or restarting (default: ${DEFAULT-VALUE}).")
    int waitMillis;

    @Option(names = "--hold-ms", defaultValue = "0", paramLabel = "MS",
            description = "Keep the lease this long (or until the daemon goes), then read every table again.")
    long holdMillis;

    @Option(names = "--fallback-checkpoint", arity = "1..*", paramLabel = "PATH",
            description = "When no daemon listens on the socket (no socket file, or connection refused), and only "
                    + "then, load this checkpoint in-process instead.")
    List<Path> fallback;

    @Option(names = "--gpu", description = "Give every table a GPU view on --device (default 0): memfd tables are "
            + "registered, cuda-vmm ones imported and mapped; device tensors of that GPU are included.")
    boolean gpu;

    @Option(names = "--cpu-view", description = "With --gpu: a CPU view of cuda-vmm tables too (costs about 3x).")
    boolean cpuView;

    @Option(names = "--verify", description = "With --gpu: a GPU kernel reads every table through its view; its "
            + "checksum must equal the CPU's and the bytes the daemon's digest.")
    boolean verify;

    @Option(names = "--populate", description = "Prefault the mappings (MAP_POPULATE).")
    boolean populate;

    /**
     * Whether {@code args}, not yet parsed, are an import with a GPU view ({@code import ... --gpu ...}), for
     * {@link Main} to start loading the CUDA driver before picocli parses them. A wrong guess costs a driver load.
     */
    static boolean asksForGpuView(String[] args) {
        return args.length > 0 && args[0].equals("import") && Arrays.asList(args).contains("--gpu");
    }

    @Override
    public Integer call() throws Exception {
        if ((cpuView || verify) && !gpu) {
            throw new ParameterException(new CommandLine(this),
                    "--cpu-view and --verify need --gpu");
        }
        ClientOptions options = ClientOptions.defaults().withName("engram-host import").withNotReadyWait(waitMillis)
                .withPopulate(populate);
        options = trust.apply(options);
        if (gpu) {
            options = options.withGpu(socket.device == null ? 0 : socket.device, cpuView);
        }
        // The SHA-256 of the manifest's check and, with --gpu, the CUDA context: in the background from here, beside
        // the expected fingerprint, the socket's path and the native bindings, instead of from the connect on.
        EngramClient.prepare(options);
        Expectation expectation = expectation();
        Path path = socket.resolveForClient();
        long t0 = System.nanoTime();
        try (ImportedTables imported = fallback == null ? EngramClient.connect(path, expectation, options)
                : EngramClient.connectOrLoad(path, expectation, options, fallback, tables,
                        Runtime.getRuntime().availableProcessors())) {
            double importMs = (System.nanoTime() - t0) / 1e6;
            ContentVerifyOptions.Outcome checked = content.verify(imported, json);
            CountDownLatch gone = new CountDownLatch(1);
            AtomicReference<String> goneReason = new AtomicReference<>();
            imported.onDaemonGone(r -> {
                goneReason.set(r);
                gone.countDown();
            });
            List<Map<String, Object>> rows = describe(imported);
            checked.annotate(rows);
            if (verify) {
                try (GpuKernels kernels = GpuKernels.load(options.device())) {
                    for (Map<String, Object> row : rows) {
                        row.put("gpu_verify", GpuVerify.verify(imported.table((String) row.get("name")), kernels));
                    }
                }
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("source", imported.source().name().toLowerCase(Locale.ROOT));
            out.put("fingerprint", imported.fingerprintSha256());
            out.put("daemon_pid", imported.daemonPid());
            Map<String, Object> timings = new LinkedHashMap<>(imported.timings().toMap());
            timings.put("import_ms", importMs);
            out.put("timings", timings);
            out.put("tables", rows);
            checked.addTo(out);
            if (holdMillis > 0) {
                boolean wentAway = gone.await(holdMillis, TimeUnit.MILLISECONDS);
                out.put("daemon_gone", wentAway ? goneReason.get() : null);
                out.put("tables_after_hold", describe(imported));
            }
            print(out, rows);
            return 0;
        }
    }

    private Expectation expectation() {
        if (expect == null) {
            return Expectation.any();
        }
        if (expect.sha != null) {
            return Expectation.sha256(expect.sha);
        }
        return Expectations.ofCheckpoint(expect.checkpoint, tables, line -> System.err.println("engram-host import: "
                + line));
    }

    private List<Map<String, Object>> describe(ImportedTables imported) {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (TableView t : imported.tables().values()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", t.name());
            m.put("dtype", t.dtype());
            m.put("shape", Arrays.stream(t.shape()).boxed().toList());
            m.put("bytes", t.bytes());
            m.put("backend", t.entry().kind().backend());
            m.put("numa_node", t.entry().numaNode());
            if (t.entry().device() >= 0) {
                m.put("device", t.entry().device());
            }
            if (t.devicePointer() != 0) {
                m.put("gpu_address", String.format("0x%x", t.devicePointer()));
            }
            m.put("region", t.entry().region());
            if (t.entry().region() >= 0) {
                m.put("attach", imported.regionTimings(t.entry().region()).toMap());
            }
            m.put("digest", String.format("%016x", t.digest()));
            if (!t.hasCpuView()) {
                m.put("cpu_view", false);
            } else if (digest == DigestKind.SHA256) {
                m.put("sha256", HexFormat.of().formatHex(t.sha256()));
            } else if (digest == DigestKind.ENGRAM) {
                long again = t.computeDigest(Runtime.getRuntime().availableProcessors());
                if (again != t.digest()) {
                    throw new IllegalStateException("table " + t.name() + ": digest through the mapping is "
                            + String.format("%016x", again) + " but the daemon computed " + String.format("%016x", t.digest()));
                }
                m.put("digest_verified", true);
            }
            rows.add(m);
        }
        return rows;
    }

    private void print(Map<String, Object> out, List<Map<String, Object>> rows) {
        if (json) {
            System.out.println(JsonWriter.write(out));
            return;
        }
        for (Map<String, Object> r : rows) {
            System.out.printf("%-48s %-8s %-18s %14s B  %s numa=%s  %s%n", r.get("name"), r.get("dtype"), r.get("shape"),
                    r.get("bytes"), r.get("backend"), r.get("numa_node"),
                    (r.containsKey("sha256") ? "sha256 " + r.get("sha256") : "digest " + r.get("digest")
                            + (r.containsKey("digest_verified") ? " (verified)" : ""))
                            + (r.containsKey("gpu_verify") ? " gpu-verified" : ""));
        }
        System.out.printf("imported %d tables from %s (fingerprint %s); timings %s%n", rows.size(), out.get("source"),
                out.get("fingerprint"), out.get("timings"));
        if (out.containsKey("daemon_gone")) {
            System.out.printf("after holding the lease: daemon gone: %s; tables still readable: %d%n",
                    out.get("daemon_gone"), ((List<?>) out.get("tables_after_hold")).size());
        }
    }
}
