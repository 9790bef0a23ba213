package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.engramhost.json.JsonReader;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.SocketPaths;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * {@code serve} as a child JVM for the conformance tests, with exactly the flags given (no implied
 * {@code --numa none}), ready once its ready file names its pid.
 */
final class ConformanceDaemon implements AutoCloseable {
    final Process process;
    final Path socket;
    final Path log;

    private ConformanceDaemon(Process process, Path socket, Path log) {
        this.process = process;
        this.socket = socket;
        this.log = log;
    }

    static ConformanceDaemon start(Path dir, String name, String... serveArgs) throws Exception {
        return launch(dir, name, serveArgs).ready();
    }

    /** Starts the process without waiting (several daemons can then load at once); {@link #ready()} waits. */
    static ConformanceDaemon launch(Path dir, String name, String... serveArgs) throws Exception {
        Path socket = dir.resolve("run-" + name + "/" + name + ".sock");
        Path log = dir.resolve(name + ".log");
        List<String> args = new ArrayList<>(List.of("serve", "--socket", socket.toString()));
        args.addAll(List.of(serveArgs));
        Process p = new ProcessBuilder(ChildJvm.command(args.toArray(String[]::new))).redirectErrorStream(true)
                .redirectOutput(log.toFile()).start();
        return new ConformanceDaemon(p, socket, log);
    }

    /** Waits until the ready file names this process; closes it on failure. */
    ConformanceDaemon ready() throws Exception {
        try {
            awaitReady();
        } catch (Throwable t) {
            close();
            throw t;
        }
        return this;
    }

    private void awaitReady() throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        Path ready = SocketPaths.readyFile(socket);
        while (true) {
            if (Files.exists(ready) && Files.readAllLines(ready).contains("pid=" + pid())) {
                return;
            }
            if (!process.isAlive()) {
                throw new AssertionError("daemon exited with " + process.exitValue() + ": " + log());
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("daemon not ready within 60 s: " + log());
            }
            Thread.sleep(20);
        }
    }

    long pid() {
        return process.pid();
    }

    /** The daemon's effective uid, from /proc (the second field of "Uid:"). */
    int euid() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/" + pid() + "/status"))) {
            if (line.startsWith("Uid:")) {
                return Integer.parseInt(line.split("\\s+")[2]);
            }
        }
        throw new AssertionError("no Uid line for pid " + pid());
    }

    /** Number of fds the daemon process has open. */
    int openFds() {
        String[] fds = Path.of("/proc/" + pid() + "/fd").toFile().list();
        if (fds == null) {
            throw new AssertionError("cannot list /proc/" + pid() + "/fd");
        }
        return fds.length;
    }

    /** Waits up to 10 s for the daemon's fd count to be {@code expected}; returns the last count. */
    int awaitFds(int expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        int n = openFds();
        while (n != expected && System.nanoTime() < deadline) {
            Thread.sleep(20);
            n = openFds();
        }
        return n;
    }

    /** STATUS over a fresh version-2 connection (BYE after), as a parsed JSON object. */
    @SuppressWarnings("unchecked")
    Map<String, Object> status() throws Exception {
        try (RawClient c = RawClient.connect(socket)) {
            c.handshake(1, 2);
            c.send(RawClient.empty(5, 2));
            RawClient.Joined reply = c.nextFrame(5000);
            assertEquals(6, reply.type(), "STATUS_REPLY");
            c.send(RawClient.empty(10, 2));
            return (Map<String, Object>) JsonReader.parse(Frames.decodeStatusReply(reply.reader()));
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(Map<String, Object> m, String key) {
        return (Map<String, Object>) m.get(key);
    }

    /** The number of leases STATUS lists. */
    @SuppressWarnings("unchecked")
    int leases() throws Exception {
        return ((List<Object>) status().get("leases")).size();
    }

    String log() throws IOException {
        return Files.readString(log, StandardCharsets.UTF_8);
    }

    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroy();
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
