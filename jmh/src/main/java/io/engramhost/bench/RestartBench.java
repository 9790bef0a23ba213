package io.engramhost.bench;

import io.engramhost.cuda.Cuda;
import io.engramhost.json.JsonReader;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.Numa;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.protocol.RegionKind;
import io.engramhost.store.HostRegionFactory;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.BenchmarkParams;

/**
 * The full restart of an engine's client process: from starting the process to its tables being usable,
 * the runtime (JVM, C or Python), the CUDA context, the handshake and the attach all included. Three peers attach
 * the same table from one daemon in this JVM: one table of {@code tableMiB} in one region of {@code backend},
 * made by the daemon's own region factory.
 * <ul>
 * <li>Ours, Java: {@code engram-host import --json} in a fresh JVM started as the release's launcher starts the
 * installed CLI ({@link #javaClient}): the project's flags, jffi's stub library from a directory, and an AppCDS
 * archive of the classes the import loads, made in the trial's setup as the release's is made at build time
 * ({@link JavaClientStart}); usable when it prints its JSON line. {@link #javaClientWithoutAppCds} is the same
 * without the archive (the launcher's {@code ENGRAM_HOST_CDS=0}).
 * <li>Baseline, C: {@code engram-attach --ready-line} ({@link #cClient}), usable at its {@code attached 1} line.
 * <li>Python: {@code python3 -m engram_host import --json --torch} ({@link #pythonClient}), usable at its JSON
 * line: it imports torch first, as an engine has, then imports every table and makes each a PyTorch tensor (on
 * GPU 0 with {@code view=gpu}). An engine has paid for its interpreter and {@code import torch} before it asks for
 * its tables, so {@link #pythonImportTorch} times that part alone ({@code python3 -c "import torch;
 * print('ready')"}). The difference of two medians of seconds-long, noisy shots is a poor measure of a few hundred
 * milliseconds, so {@link #pythonAfterTorch} times "Python after import torch" directly: its process imports
 * torch and waits (not timed, in the invocation's setup), and the shot is from the go on its stdin to its JSON
 * line: the client's own imports, the CUDA context, the handshake, the attach and the tensors (issue 11's target:
 * within 1.2x of {@link #cClient}). With {@code torch=false} (CI, where there is no PyTorch) the client makes no
 * tensors and {@code pythonImportTorch} times the bare interpreter. The interpreter is {@code -Dengram.python} or
 * {@code $ENGRAM_HOST_PYTHON}, else {@code python3} on PATH; the package directory {@code -Dengram.python.path} or
 * {@code $ENGRAM_HOST_PYTHONPATH}, else the repository's {@code python/} ({@link PeerClients}); a missing
 * interpreter, package or (with {@code torch=true}) PyTorch fails the Python benchmarks, naming it, before the
 * table is made.
 * </ul>
 * With {@code view=gpu} every table gets a GPU view (memfds registered, cuda-vmm imported and GPU-mapped);
 * {@code view=cpu} maps memfds for the CPU only and exists so the plumbing can be tested without a GPU.
 * Each shot is one process ({@link ClientProcess}); after the shot (not timed) the child releases, exits by itself
 * and must exit 0, and the Java and Python clients' JSON must describe the table (and, with torch, its tensor).
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 1)
@Measurement(iterations = 5)
@Fork(1)
public class RestartBench {
    /** How long a child may take to print its ready line, and then to exit, before it is killed. */
    static final long CHILD_TIMEOUT_MILLIS = 120_000;
    /** Row size of the table (U8 rows x 256): a MiB is 4096 rows. */
    static final int ROW_BYTES = 256;
    /** The C client's ready line for its one repetition. */
    static final String C_READY = "attached 1";
    /** pythonImportTorch's ready line. */
    static final String PYTHON_READY = "ready";
    /** pythonAfterTorch's line once torch is imported, before it waits for its go on stdin. */
    static final String TORCH_READY = "torch-ready";

    /** memfd, memfd-hugetlb or cuda-vmm (a HOST_NUMA allocation on GPU 0's node). */
    @Param({"memfd", "memfd-hugetlb", "cuda-vmm"})
    public String backend;

    /** The one table's size in MiB. */
    @Param({"16384"})
    public long tableMiB;

    /** gpu: every table gets a GPU view (needs CUDA); cpu: memfds mapped for the CPU only (tests). */
    @Param({"gpu"})
    public String view;

    /**
     * true: the Python client imports torch first and makes every table a tensor ({@code --torch}), as an engine
     * would; false: neither (CI, without PyTorch). Only the Python benchmarks read it.
     */
    @Param({"true"})
    public boolean torch;

    /** Tests shorten it to see the kill. */
    long childTimeoutMillis = CHILD_TIMEOUT_MILLIS;
    /** engram-attach, found on first use ({@link #engramAttach()}); tests may set a stand-in. */
    Path attachBinary;
    /** The Python client, found and checked in the trial setup or on first use ({@link #python()}); or a stand-in. */
    PeerClients.Python python;
    /** The package compiled in this trial's scratch directory, which the Python children import. */
    private PeerClients.Python compiled;
    private List<String> pythonCommand;
    private List<String> importTorchCommand;
    private List<String> afterTorchCommand;

    private RegionKind kind;
    private boolean gpu;
    private JavaClientStart javaStart;
    /** {@link #javaClient}'s command (its archive made on first use) and {@link #javaClientWithoutAppCds}'s. */
    private List<String> javaCommand;
    private List<String> javaWithoutAppCdsCommand;
    private InProcessDaemon daemon;
    private Path scratch;
    private ScheduledThreadPoolExecutor watchdog;
    private Thread reaper;
    private volatile ClientProcess child;

    /**
     * JMH's trial setup: the Python benchmarks first find and check the interpreter, the package and torch (not
     * timed, and before a large table is made for nothing); then {@link #setUp()}; then what the benchmark's first
     * shot would otherwise do: the Python package's compiled copy, the Java client's AppCDS archive.
     */
    @Setup(Level.Trial)
    public void setUpTrial(BenchmarkParams params) {
        String m = params.getBenchmark();
        boolean py = m.endsWith(".pythonClient") || m.endsWith(".pythonImportTorch")
                || m.endsWith(".pythonAfterTorch");
        if (py) {
            python();
        }
        setUp();
        try {
            if (py) {
                pythonCommands();
            } else if (m.endsWith(".javaClient")) {
                javaCommand();
            }
        } catch (RuntimeException | Error e) {
            release();
            throw e;
        }
    }

    /** The daemon and its table (tests call it directly). */
    public void setUp() {
        kind = kind(backend);
        gpu = gpuView(view);
        if (tableMiB < 1) {
            throw new IllegalArgumentException("tableMiB: need at least 1, got " + tableMiB);
        }
        if (!gpu && kind == RegionKind.VMM_HOST) {
            throw new IllegalArgumentException("view=cpu with backend=cuda-vmm: a cuda-vmm region is attached only"
                    + " through CUDA (cuMemImportFromShareableHandle, cuMemMap), so it has no CPU-only restart;"
                    + " use view=gpu");
        }
        if (gpu) {
            AttachTables.requireCuda(RestartBench.class);
        }
        QuietDaemonLog.install();
        try {
            scratch = Files.createTempDirectory("engram-restart-");
            watchdog = new ScheduledThreadPoolExecutor(1, r -> {
                Thread t = new Thread(r, "restart-bench-watchdog");
                t.setDaemon(true);
                return t;
            });
            watchdog.setRemoveOnCancelPolicy(true);
            watchdog.prestartCoreThread();
            reaper = new Thread(this::killChild, "restart-bench-reaper");
            Runtime.getRuntime().addShutdownHook(reaper);
            HostRegionFactory regions = regions(kind, gpu);
            long rows = Math.multiplyExact(tableMiB, (1L << 20) / ROW_BYTES);
            daemon = InProcessDaemon.start(() -> BenchTables.build(1, rows, ROW_BYTES, regions));
            javaStart = JavaClientStart.in(scratch.resolve("java"));
        } catch (IOException e) {
            release();
            throw new UncheckedIOException("cannot create a scratch directory for the clients' stderr", e);
        } catch (RuntimeException | Error e) {
            release();
            throw e;
        }
    }

    /**
     * Ours: a fresh JVM, started as the release's launcher starts it (with the AppCDS archive), runs
     * {@code engram-host import}; returns its JSON line, printed while the tables are held.
     */
    @Benchmark
    public String javaClient() {
        return run("the Java client", javaCommand(), l -> l.startsWith("{"), "java", Map.of());
    }

    /** {@link #javaClient} without the AppCDS archive. */
    @Benchmark
    public String javaClientWithoutAppCds() {
        if (javaWithoutAppCdsCommand == null) {
            javaWithoutAppCdsCommand = javaStart.command(importArguments());
        }
        return run("the Java client (without AppCDS)", javaWithoutAppCdsCommand, l -> l.startsWith("{"), "java",
                Map.of());
    }

    /** Baseline: {@code engram-attach} (C); returns its {@code attached 1} line. */
    @Benchmark
    public String cClient() {
        // The binary is found on first use (then kept), so that a missing one fails only this benchmark.
        List<String> cmd = new ArrayList<>(List.of(engramAttach().toString(), "--socket", daemon.socket().toString(),
                "--device", "0", "--ready-line"));
        if (gpu && kind.memfd()) {
            cmd.add("--register");
        }
        return run("the C client", cmd, C_READY::equals, "c", Map.of());
    }

    /**
     * Python: {@code python3 -m engram_host import --json} (with {@code --torch}, and {@code --gpu --device 0} for
     * the gpu view); returns its JSON line, printed while the tables (and tensors) are held.
     */
    @Benchmark
    public String pythonClient() {
        pythonCommands();
        return run("the Python client", pythonCommand, l -> l.startsWith("{"), "python", compiled.environment());
    }

    /**
     * What an engine has paid before it asks for its tables: the same interpreter, with the same environment, runs
     * {@code import torch} (only starts, with {@code torch=false}) and prints {@code ready}; subtracted from
     * {@link #pythonClient}.
     */
    @Benchmark
    public String pythonImportTorch() {
        pythonCommands();
        return run("the Python interpreter (import torch)", importTorchCommand, PYTHON_READY::equals, "import-torch",
                compiled.environment());
    }

    /**
     * Before each shot of {@link #pythonAfterTorch} (not timed): its process starts, imports torch (with
     * {@code torch=true}) and waits for a line on stdin.
     */
    @Setup(Level.Invocation)
    public void startPythonAfterTorch(BenchmarkParams params) {
        if (params.getBenchmark().endsWith(".pythonAfterTorch")) {
            startWaitingPython();
        }
    }

    /** Starts the Python process that {@link #pythonAfterTorch} tells to go (tests call it directly). */
    void startWaitingPython() {
        pythonCommands();
        run("the Python client (torch imported first)", afterTorchCommand, TORCH_READY::equals, "python",
                compiled.environment(), true);
    }

    /**
     * Python after import torch: the waiting process of {@link #startPythonAfterTorch} gets its go and runs the
     * client's {@code import --json} (with {@code --torch} and the gpu view as {@link #pythonClient}); returns its
     * JSON line.
     */
    @Benchmark
    public String pythonAfterTorch() {
        ClientProcess c = child;
        if (c == null) {
            throw new IllegalStateException("pythonAfterTorch: no waiting Python process (its setup did not run)");
        }
        return c.go(l -> l.startsWith("{"), childTimeoutMillis, watchdog);
    }

    /** The Python client ({@link PeerClients#python}), found and checked once. */
    PeerClients.Python python() {
        if (python == null) {
            python = PeerClients.python(torch);
        }
        return python;
    }

    /**
     * The Python benchmarks' commands for this trial's daemon, made once (in the trial setup, or on first use), and
     * the compiled copy of the package they import ({@link PeerClients.Python#compiledCopy}).
     */
    private void pythonCommands() {
        if (pythonCommand != null) {
            return;
        }
        compiled = python().compiledCopy(scratch.resolve("python"));
        String exe = compiled.interpreter().toString();
        List<String> cmd = new ArrayList<>(List.of(exe, "-m", "engram_host", "import", "--socket",
                daemon.socket().toString(), "--json"));
        if (torch) {
            cmd.add("--torch");
        }
        if (gpu) {
            cmd.addAll(List.of("--gpu", "--device", "0"));
        }
        pythonCommand = List.copyOf(cmd);
        importTorchCommand = List.of(exe, "-c", (torch ? "import torch; " : "") + "print('" + PYTHON_READY
                + "', flush=True)");
        List<String> after = new ArrayList<>(List.of(exe, "-c", "import sys\n" + (torch ? "import torch\n" : "")
                + "print('" + TORCH_READY + "', flush=True)\nsys.stdin.readline()\n"
                + "from engram_host.cli import main\nsys.exit(main(sys.argv[1:]))"));
        after.addAll(cmd.subList(3, cmd.size())); // import --socket ... (what follows "-m engram_host")
        afterTorchCommand = List.copyOf(after);
    }

    /** {@link #javaClient}'s command, its AppCDS archive made the first time (in the trial's setup under JMH). */
    private List<String> javaCommand() {
        if (javaCommand == null) {
            javaCommand = javaStart.commandWithAppCds(importArguments());
        }
        return javaCommand;
    }

    /** The CLI's import of this trial's daemon, with the GPU view on GPU 0 for view=gpu. */
    private List<String> importArguments() {
        List<String> args = new ArrayList<>(List.of("import", "--socket", daemon.socket().toString(), "--json"));
        if (gpu) {
            args.addAll(List.of("--gpu", "--device", "0"));
        }
        return List.copyOf(args);
    }

    /**
     * After each shot, not timed: the child releases its tables and exits by itself; it must exit 0 within
     * {@link #childTimeoutMillis}, or it is killed. Throws with the command and the tail of its stderr.
     */
    @TearDown(Level.Invocation)
    public void awaitExit() {
        ClientProcess c = child;
        if (c == null) {
            return;
        }
        try {
            int status = c.finish(watchdog, childTimeoutMillis);
            if (c.killed.get()) {
                throw c.failure("did not exit within " + childTimeoutMillis + " ms of its ready line and was killed");
            }
            if (status != 0) {
                throw c.failure("exited with status " + status + " after its ready line");
            }
            if (c.label.equals("java")) {
                checkJsonLine(c, false);
                // Where the shot's time went, for the run's log (the client's own figures, not the score).
                System.out.println("java client timings: "
                        + c.readyLine.replaceAll(".*\"timings\":(\\{[^}]*}).*", "$1"));
            } else if (c.label.equals("python")) {
                checkJsonLine(c, torch);
                // Where the shot's time went, for the run's log (the client's own figures, not the score).
                System.out.println("python client timings: " + c.readyLine.replaceAll(".*\"timings\": (\\{[^}]*}).*", "$1")
                        + (c.readyLine.contains("\"tensors_ms\"") ? " tensors_ms "
                                + c.readyLine.replaceAll(".*\"tensors_ms\": ([0-9.]+).*", "$1") : ""));
            }
        } finally {
            c.destroy();
            child = null;
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        release();
    }

    private String run(String what, List<String> command, Predicate<String> ready, String label,
            Map<String, String> environment) {
        return run(what, command, ready, label, environment, false);
    }

    private String run(String what, List<String> command, Predicate<String> ready, String label,
            Map<String, String> environment, boolean stdin) {
        if (child != null) {
            killChild();
            throw new IllegalStateException("a client was still running when " + what + " started: the invocation"
                    + " teardown (awaitExit) was skipped; it has been killed");
        }
        ClientProcess c = ClientProcess.start(what, label, command, environment, scratch.resolve(label + ".stderr"),
                watchdog, childTimeoutMillis, stdin);
        child = c;
        try {
            return c.awaitReady(ready, childTimeoutMillis);
        } catch (RuntimeException | Error e) {
            c.destroy();
            child = null;
            throw e;
        }
    }

    /**
     * The Java or Python client's line must describe the one table, with a GPU address when the view is gpu; with
     * {@code tensors} (the Python client's --torch), also its tensor: on cuda:0 for the gpu view (the CPU otherwise),
     * of the table's shape.
     */
    private void checkJsonLine(ClientProcess c, boolean tensors) {
        Object parsed;
        try {
            parsed = JsonReader.parse(c.readyLine);
        } catch (RuntimeException e) {
            throw c.failure("printed a line that is not JSON (" + e.getMessage() + "): " + c.readyLine);
        }
        Map<?, ?> doc = parsed instanceof Map<?, ?> m ? m : Map.of();
        List<?> tables = doc.get("tables") instanceof List<?> l ? l : List.of();
        Map<?, ?> t = tables.size() == 1 && tables.get(0) instanceof Map<?, ?> one ? one : Map.of();
        String name = BenchTables.name(0);
        boolean ok = name.equals(t.get("name")) && Long.valueOf(tableMiB << 20).equals(t.get("bytes"))
                && kind.backend().equals(t.get("backend")) && (!gpu || t.containsKey("gpu_address"));
        if (!ok) {
            throw c.failure("did not report the one table of " + (tableMiB << 20) + " bytes (" + kind.backend()
                    + (gpu ? ", with a GPU address" : "") + "): " + c.readyLine);
        }
        if (tensors) {
            Map<?, ?> torchDoc = doc.get("torch") instanceof Map<?, ?> m ? m : Map.of();
            Map<?, ?> all = torchDoc.get("tensors") instanceof Map<?, ?> m ? m : Map.of();
            Map<?, ?> x = all.size() == 1 && all.get(name) instanceof Map<?, ?> m ? m : Map.of();
            String device = gpu ? "cuda:0" : "cpu";
            List<Long> shape = List.of((tableMiB << 20) / ROW_BYTES, (long) ROW_BYTES);
            if (!device.equals(x.get("device")) || !shape.equals(x.get("shape"))) {
                throw c.failure("did not report a tensor " + shape + " on " + device + " for " + name
                        + " (\"torch\": {\"tensors\": {...}}): " + c.readyLine);
            }
        }
    }

    /** The C client ({@link PeerClients#engramAttach()}), unless a test set a stand-in. */
    Path engramAttach() {
        if (attachBinary == null) {
            attachBinary = PeerClients.engramAttach();
        }
        return attachBinary;
    }

    static RegionKind kind(String backend) {
        for (RegionKind k : List.of(RegionKind.MEMFD, RegionKind.MEMFD_HUGETLB, RegionKind.VMM_HOST)) {
            if (k.backend().equals(backend)) {
                return k;
            }
        }
        throw new IllegalArgumentException("backend: '" + backend + "' is not one of memfd, memfd-hugetlb, cuda-vmm");
    }

    private static boolean gpuView(String view) {
        return switch (String.valueOf(view)) {
            case "gpu" -> true;
            case "cpu" -> false;
            default -> throw new IllegalArgumentException("view: '" + view + "' is not one of gpu, cpu");
        };
    }

    /**
     * The daemon's regions: cuda-vmm on GPU 0's node (0 when the driver names none); memfds bound to GPU 0's
     * node for the gpu view where the driver names one and mbind is allowed, with no policy otherwise.
     */
    private static HostRegionFactory regions(RegionKind kind, boolean gpu) {
        int node = gpu ? Cuda.device(0).hostNumaId() : -1;
        if (kind == RegionKind.VMM_HOST) {
            return HostRegionFactory.vmm(Math.max(0, node), 0);
        }
        PageKind pages = kind == RegionKind.MEMFD_HUGETLB ? PageKind.HUGE_2M : PageKind.SMALL;
        NumaPolicy policy = node >= 0 && Numa.probe().isEmpty() ? NumaPolicy.bind(node) : NumaPolicy.none();
        return HostRegionFactory.memfd(pages, policy);
    }

    /** Kills the running child, if any: for the shutdown hook and for a trial that ends with one still running. */
    private void killChild() {
        ClientProcess c = child;
        if (c != null) {
            c.destroy();
            child = null;
        }
    }

    /** Frees whatever the trial holds, whatever it got to: child, daemon and table, watchdog, hook, scratch. */
    private void release() {
        List<Throwable> failures = new ArrayList<>();
        attempt(failures, this::killChild);
        attempt(failures, () -> {
            if (daemon != null) {
                daemon.close(); // frees the table: the catalog is the daemon's
                daemon = null;
            }
        });
        pythonCommand = null; // they name this daemon's socket and import from its scratch directory
        importTorchCommand = null;
        compiled = null;
        javaStart = null;
        javaCommand = null;
        javaWithoutAppCdsCommand = null;
        attempt(failures, () -> {
            if (watchdog != null) {
                watchdog.shutdownNow();
                watchdog = null;
            }
        });
        attempt(failures, () -> {
            if (reaper != null) {
                try {
                    Runtime.getRuntime().removeShutdownHook(reaper);
                } catch (IllegalStateException shuttingDown) {
                    // the hook is running or about to
                }
                reaper = null;
            }
        });
        attempt(failures, () -> {
            if (scratch != null) {
                InProcessDaemon.deleteTree(scratch);
                scratch = null;
            }
        });
        if (!failures.isEmpty()) {
            RuntimeException e = new IllegalStateException("RestartBench could not release everything: "
                    + failures.get(0).getMessage(), failures.get(0));
            failures.stream().skip(1).forEach(e::addSuppressed);
            throw e;
        }
    }

    private static void attempt(List<Throwable> failures, Runnable step) {
        try {
            step.run();
        } catch (RuntimeException | Error e) {
            failures.add(e);
        }
    }
}
