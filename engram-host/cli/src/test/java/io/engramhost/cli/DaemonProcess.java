package io.engramhost.cli;

import io.engramhost.cli.testing.TestJvm;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** A daemon started as a separate process through the CLI, as an operator would. */
final class DaemonProcess implements AutoCloseable {
    final Process process;
    final Path socket;
    final Path log;

    private DaemonProcess(Process process, Path socket, Path log) {
        this.process = process;
        this.socket = socket;
        this.log = log;
    }

    static DaemonProcess start(Path socket, Path log, String... serveArgs) throws IOException {
        return startWithJvmOptions(List.of(), socket, log, serveArgs);
    }

    /** As {@link #start}, with JVM options after the launcher's own (a later -Xmx wins), as ENGRAM_HOST_JVM_OPTS does. */
    static DaemonProcess startWithJvmOptions(List<String> jvmOptions, Path socket, Path log, String... serveArgs)
            throws IOException {
        return start(jvmOptions, Map.of(), socket, log, serveArgs);
    }

    /** As {@link #start}, with environment variables changed: a null value removes the variable. */
    static DaemonProcess startWithEnvironment(Map<String, String> environment, Path socket, Path log,
            String... serveArgs) throws IOException {
        return start(List.of(), environment, socket, log, serveArgs);
    }

    private static DaemonProcess start(List<String> jvmOptions, Map<String, String> environment,
            Path socket, Path log, String... serveArgs) throws IOException {
        List<String> args = new ArrayList<>(List.of("serve", "--socket", socket.toString(), "--numa", "none"));
        args.addAll(List.of(serveArgs));
        List<String> command = new ArrayList<>(TestJvm.command(args.toArray(String[]::new)));
        command.addAll(command.indexOf("-cp"), jvmOptions);
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
        environment.forEach((k, v) -> {
            if (v == null) {
                pb.environment().remove(k);
            } else {
                pb.environment().put(k, v);
            }
        });
        Process p = pb.start();
        return new DaemonProcess(p, socket, log);
    }

    DaemonProcess awaitReady() throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        // The ready file must name this process: one left by a dead daemon does not count.
        while (!String.valueOf(pid()).equals(ReadyFile.read(SocketPaths.readyFile(socket)).get("pid"))) {
            if (!process.isAlive()) {
                throw new AssertionError("daemon exited with " + process.exitValue() + ": " + log());
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("daemon not ready within 120 s: " + log());
            }
            Thread.sleep(20);
        }
        return this;
    }

    long pid() {
        return process.pid();
    }

    /** Number of fds the daemon process has open. */
    int openFds() {
        String[] fds = Path.of("/proc/" + pid() + "/fd").toFile().list();
        if (fds == null) {
            throw new AssertionError("cannot list /proc/" + pid() + "/fd");
        }
        return fds.length;
    }

    String log() throws IOException {
        return Files.readString(log, StandardCharsets.UTF_8);
    }

    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroy(); // SIGTERM: the daemon removes its socket and ready file
            try {
                if (!process.waitFor(20, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                }
            } catch (InterruptedException e) {
                process.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
    }
}
