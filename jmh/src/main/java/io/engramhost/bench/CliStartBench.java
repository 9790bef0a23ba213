package io.engramhost.bench;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * The release's CLI start (issue 13): from starting {@code bin/engram-host status} of the unpacked release tarball
 * to the first line it prints, with the AppCDS archive ({@link #statusWithAppCds}) and without it
 * ({@link #statusWithoutAppCds}, {@code ENGRAM_HOST_CDS=0}), in one run, against a daemon started from the same
 * tarball. The tarball is {@code -Dengram.dist=FILE}, else the newest {@code dist/engram-host-*-linux-x86_64.tar.gz}
 * in the working directory or a directory above it (what {@code mvn -Pdist package} builds); it is unpacked into a
 * scratch directory, so the launcher takes its bundled runtime, as on a machine with no Java.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 2)
@Measurement(iterations = 15)
@Fork(1)
public class CliStartBench {
    private Path scratch;
    private Path launcher;
    private Path socket;
    private Process daemon;

    @Setup(Level.Trial)
    public void setUp() throws Exception {
        Path tarball = tarball();
        scratch = Files.createTempDirectory("engram-clistart-");
        run(List.of("tar", "-xzf", tarball.toString(), "-C", scratch.toString()));
        try (Stream<Path> s = Files.list(scratch)) {
            launcher = s.filter(Files::isDirectory).findFirst().orElseThrow().resolve("bin/engram-host");
        }
        run(List.of(launcher.toString(), "generate", "--out", scratch.resolve("ckpt").toString(), "--rows", "1000"));
        socket = scratch.resolve("run/c.sock");
        daemon = new ProcessBuilder(launcher.toString(), "serve", "--checkpoint", scratch.resolve("ckpt").toString(),
                "--socket", socket.toString(), "--numa", "none").redirectErrorStream(true)
                .redirectOutput(scratch.resolve("daemon.log").toFile()).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!Files.exists(Path.of(socket + ".ready"))) {
            if (!daemon.isAlive() || System.nanoTime() > deadline) {
                throw new IllegalStateException("the daemon of " + launcher + " did not get ready: "
                        + Files.readString(scratch.resolve("daemon.log")));
            }
            Thread.sleep(20);
        }
    }

    private static Path tarball() throws IOException {
        String given = System.getProperty("engram.dist");
        if (given != null) {
            return Path.of(given);
        }
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path dist = d.resolve("dist");
            if (Files.isDirectory(dist)) {
                try (Stream<Path> s = Files.list(dist)) {
                    Optional<Path> t = s.filter(p -> p.getFileName().toString().matches(
                            "engram-host-.*-linux-x86_64\\.tar\\.gz")).max(Comparator.comparing(p -> p.toFile()
                            .lastModified()));
                    if (t.isPresent()) {
                        return t.get();
                    }
                }
            }
        }
        throw new IllegalStateException("no release tarball: build it with mvn -B -Pdist package, or pass"
                + " -Dengram.dist=FILE");
    }

    private static void run(List<String> command) throws Exception {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException(String.join(" ", command) + " failed: " + out);
        }
    }

    /** Starts {@code status}, returns its first line (not timed: it then runs to its end and must exit 0). */
    private String status(String cds) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(launcher.toString(), "status", "--socket", socket.toString())
                .redirectError(ProcessBuilder.Redirect.DISCARD)
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
        pb.environment().put("ENGRAM_HOST_CDS", cds);
        Process p = pb.start();
        BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String first = r.readLine();
        if (first == null || !first.startsWith("state")) {
            p.destroyForcibly();
            throw new IllegalStateException("status printed '" + first + "' first");
        }
        last = p;
        return first;
    }

    private Process last;

    @Benchmark
    public String statusWithAppCds() throws Exception {
        return status("1");
    }

    @Benchmark
    public String statusWithoutAppCds() throws Exception {
        return status("0");
    }

    @TearDown(Level.Invocation)
    public void reap() throws Exception {
        Process p = last;
        last = null;
        if (p != null) {
            p.getInputStream().transferTo(OutputStream.nullOutputStream());
            if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
                p.destroyForcibly();
                throw new IllegalStateException("status did not exit 0");
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        if (daemon != null && daemon.isAlive()) {
            daemon.destroy();
            daemon.waitFor(30, TimeUnit.SECONDS);
        }
        if (scratch != null) {
            try (Stream<Path> all = Files.walk(scratch)) {
                all.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }
}
