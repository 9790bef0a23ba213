package io.engramhost.bench;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.cli.testing.EnvGateHooks;
import io.engramhost.cli.testing.TestJvm;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.os.Posix;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.stream.Stream;
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
 * The daemon's own restart (issue 12), each way against a full reload of the same checkpoint, all with the daemon
 * as a separate process started as {@code engram-host serve} (the CLI's JVM and flags, as the test launcher runs it:
 * {@link TestJvm}, whose takeover gate lets a takeover be timed without the JVM's start), on a checkpoint of
 * {@code checkpointMiB} generated in the trial's setup (V4.1 layout, 2 layers), or {@code $ENGRAM_BENCH_CHECKPOINT}
 * when set:
 * <ul>
 * <li>{@link #takeover}: a successor {@code serve --takeover}, its JVM already up and held (not timed) just before it
 * connects; the shot is from its go to its ready file: the request, the catalog and fds, the checks, the commit.
 * The target is 100 ms.</li>
 * <li>{@link #takeoverWithJvm}: the same, the successor's process start included.</li>
 * <li>{@link #fdStoreRestart}: under systemd's side played by {@code conformance/systemd_emulator.py} (the daemon
 * SIGKILLed in the setup, not timed), from the emulator's restart (its gate, polled every 10 ms) to the new process's
 * ready file: the JVM's start, the fds at 3, 4, ..., the catalog's and the fds' checks, the fingerprint of the
 * checkpoint on disk. The target is 1 s.</li>
 * <li>{@link #reload}: the baseline, a new {@code serve} after the old one stopped (not timed), from process start
 * to ready: the regions made, the checkpoint read (from the page cache: it was just written or read), digested
 * and sealed.</li>
 * </ul>
 * The ready file names the daemon that wrote it, so "ready" is the moment it names the new pid.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 1)
@Measurement(iterations = 5)
@Fork(1)
public class DaemonRestartBench {
    static final long READY_TIMEOUT_NANOS = TimeUnit.SECONDS.toNanos(300);
    /** The emulator's path from the repository root (the bench runs there, or below it). */
    static final String EMULATOR = "conformance/systemd_emulator.py";

    @Param({"1024", "4096"})
    public long checkpointMiB;

    /** memfd, memfd-hugetlb or cuda-vmm. */
    @Param({"memfd"})
    public String backend;

    /** The daemon's reader threads for a load. */
    @Param({"4"})
    public int threads;

    private Path scratch;
    private Path checkpoint;
    private Path socket;
    private Path gate;
    private String method;
    /** The daemon serving now (or the emulator that runs it, for fdStoreRestart). */
    private Process current;
    private Process successor;
    private int killed;
    private int logs;

    @Setup(Level.Trial)
    public void setUp(BenchmarkParams params) throws Exception {
        String b = params.getBenchmark();
        method = b.substring(b.lastIndexOf('.') + 1);
        scratch = Files.createTempDirectory("engram-restart-bench-");
        socket = scratch.resolve("run/d.sock");
        gate = scratch.resolve("gate");
        String given = System.getenv(ColdStartBench.CHECKPOINT_ENV);
        if (given != null && !given.isBlank()) { // one checkpoint generated for every fork of a large run
            checkpoint = Path.of(given);
        } else {
            long rows = checkpointMiB * (1L << 20) / 2 / 264;
            checkpoint = CheckpointGenerator.writeSharded(scratch.resolve("ckpt"),
                    new CheckpointGenerator.Spec(List.of(1, 14), rows, 256, 7));
        }
        if (method.equals("fdStoreRestart")) {
            Path emulator = findUp(Path.of("").toAbsolutePath(), EMULATOR);
            List<String> cmd = new ArrayList<>(List.of("python3", emulator.toString(), "--events",
                    scratch.resolve("events.jsonl").toString(), "--fdstore-max", "4096", "--restart-gate",
                    gate.toString(), "--restarts", "100000", "--"));
            cmd.addAll(serve(false));
            current = start(cmd, new String[0]);
        } else {
            current = start(serve(false), new String[0]);
        }
        awaitReady(-1, current);
    }

    private List<String> serve(boolean takeover) {
        List<String> args = new ArrayList<>(List.of("serve", "--checkpoint", checkpoint.toString(), "--socket",
                socket.toString(), "--backend", backend, "--numa", "none", "--threads", String.valueOf(threads)));
        if (takeover) {
            args.add("--takeover");
        }
        return TestJvm.command(args.toArray(String[]::new));
    }

    private Process start(List<String> command, String[] environment) throws IOException {
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(scratch.resolve("daemon-" + (++logs) + ".log").toFile())
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
        for (int i = 0; i + 1 < environment.length; i += 2) {
            pb.environment().put(environment[i], environment[i + 1]);
        }
        return pb.start();
    }

    /** Waits until the ready file names a live process other than {@code not} ({@code of}: must stay alive). */
    private int awaitReady(int not, Process of) throws IOException {
        long deadline = System.nanoTime() + READY_TIMEOUT_NANOS;
        Path ready = SocketPaths.readyFile(socket);
        while (true) {
            String pid = Files.exists(ready) ? ReadyFile.read(ready).get("pid") : null;
            if (pid != null && Integer.parseInt(pid) != not && Posix.processExists(Integer.parseInt(pid))) {
                return Integer.parseInt(pid);
            }
            if (!of.isAlive() || System.nanoTime() > deadline) {
                throw new IllegalStateException("no daemon ready on " + socket + " (" + method + "); logs in " + scratch
                        + ": " + tail());
            }
            LockSupport.parkNanos(100_000);
        }
    }

    private String tail() throws IOException {
        Path last = scratch.resolve("daemon-" + logs + ".log");
        String s = Files.exists(last) ? Files.readString(last) : "";
        return s.length() > 2000 ? s.substring(s.length() - 2000) : s;
    }

    @Setup(Level.Invocation)
    public void prepare() throws Exception {
        Files.deleteIfExists(gate);
        switch (method) {
            case "takeover" -> {
                // a serving daemon has answered clients: one STATUS, so that its first answers' costs are not timed
                EngramClient.status(socket, ClientOptions.defaults());
                successor = start(serve(true), new String[] {EnvGateHooks.TAKEOVER_GATE, "request:" + gate});
                Path log = scratch.resolve("daemon-" + logs + ".log");
                long deadline = System.nanoTime() + READY_TIMEOUT_NANOS;
                while (!Files.readString(log).contains("held at 'request'")) {
                    if (!successor.isAlive() || System.nanoTime() > deadline) {
                        throw new IllegalStateException("the successor did not reach its gate: " + tail());
                    }
                    Thread.sleep(5);
                }
            }
            case "reload" -> {
                stop(current);
                current = null;
            }
            case "fdStoreRestart" -> {
                killed = readyPid();
                Posix.kill(killed, 9);
                while (Posix.processExists(killed)) {
                    Thread.sleep(1);
                }
            }
            default -> { }
        }
    }

    private int readyPid() {
        return Integer.parseInt(ReadyFile.read(SocketPaths.readyFile(socket)).get("pid"));
    }

    @Benchmark
    public int takeover() throws Exception {
        Files.writeString(gate, "go");
        return awaitReady((int) current.pid(), successor);
    }

    @Benchmark
    public int takeoverWithJvm() throws Exception {
        successor = start(serve(true), new String[0]);
        return awaitReady((int) current.pid(), successor);
    }

    @Benchmark
    public int fdStoreRestart() throws Exception {
        Files.writeString(gate, "go");
        return awaitReady(killed, current);
    }

    @Benchmark
    public int reload() throws Exception {
        current = start(serve(false), new String[0]);
        return awaitReady(-1, current);
    }

    /** After a takeover the predecessor must exit 0 (not timed); the successor serves from now on. */
    @TearDown(Level.Invocation)
    public void settle() throws Exception {
        String how = switch (method) {
            case "fdStoreRestart" -> "fd-store";
            case "reload" -> "load";
            default -> "takeover";
        };
        String status = EngramClient.status(socket, ClientOptions.defaults());
        if (!status.contains("\"how\":\"" + how + "\"")) {
            throw new IllegalStateException(method + ": the daemon did not come back by " + how + ": " + status
                    .substring(0, Math.min(status.length(), 600)) + "; logs in " + scratch + ": " + tail());
        }
        if (successor == null) {
            return;
        }
        if (!current.waitFor(60, TimeUnit.SECONDS) || current.exitValue() != 0) {
            throw new IllegalStateException("the predecessor did not exit 0 after the takeover: " + tail());
        }
        current = successor;
        successor = null;
    }

    private static void stop(Process p) throws InterruptedException {
        if (p != null && p.isAlive()) {
            p.destroy();
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor();
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        stop(successor);
        stop(current);
        if (scratch != null && System.getenv("ENGRAM_BENCH_KEEP") == null) {
            try (Stream<Path> all = Files.walk(scratch)) {
                all.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    private static Path findUp(Path from, String relative) {
        for (Path d = from; d != null; d = d.getParent()) {
            if (Files.isRegularFile(d.resolve(relative))) {
                return d.resolve(relative);
            }
        }
        throw new UncheckedIOException(new IOException(relative + " is in neither " + from + " nor a directory above it;"
                + " run the benchmark from the repository"));
    }
}
