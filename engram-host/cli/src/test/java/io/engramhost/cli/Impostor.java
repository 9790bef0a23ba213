package io.engramhost.cli;

import io.engramhost.os.Posix;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * An impostor daemon (src/test/resources/impostor_daemon.py, written from docs/protocol.md) as a
 * separate process, as root or as another uid (setpriv), listening on a socket path of its own.
 * Serves connections until closed; {@link #awaitLine} waits for what it says a client did.
 */
final class Impostor implements AutoCloseable {
    static final int NOBODY = 65534;

    final Process process;
    final Path socket;
    private final List<String> lines = new ArrayList<>();

    private Impostor(Process process, Path socket) {
        this.process = process;
        this.socket = socket;
        Thread reader = new Thread(() -> read(process.getInputStream()), "impostor output");
        reader.setDaemon(true);
        reader.start();
    }

    /** A directory under /tmp that every uid can traverse (the build tree's tmp may not be). */
    static Path sharedDir(String prefix) throws IOException {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), prefix);
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxr-xr-x"));
        return dir;
    }

    static void deleteTree(Path dir) throws IOException {
        try (var s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    /** True when this JVM can run a process as {@link #NOBODY} (root, with setpriv). */
    static boolean canRunAsNobody() {
        return Posix.geteuid() == 0 && Files.isExecutable(Path.of("/usr/bin/setpriv"));
    }

    /** An impostor playing {@code kase} on {@code dir/name.sock}, as root (this JVM's uid) or as nobody. */
    static Impostor start(Path dir, String name, String kase, boolean asNobody) throws Exception {
        return start(dir, name, kase, asNobody ? List.of("setpriv", "--reuid=" + NOBODY, "--regid=" + NOBODY,
                "--clear-groups") : List.of());
    }

    /** An impostor run through {@code prefix} (setpriv for another uid, unshare for another pid namespace). */
    static Impostor start(Path dir, String name, String kase, List<String> prefix) throws Exception {
        boolean asNobody = prefix.contains("--reuid=" + NOBODY);
        Path home = Files.createDirectories(dir.resolve(name));
        Path script = home.resolve("impostor_daemon.py");
        try (InputStream in = Impostor.class.getResourceAsStream("/impostor_daemon.py")) {
            Files.copy(in, script);
        }
        Files.setPosixFilePermissions(script, PosixFilePermissions.fromString("rw-r--r--"));
        List<String> cmd = new ArrayList<>(prefix);
        if (asNobody) {
            Files.setAttribute(home, "unix:uid", NOBODY);
            Files.setAttribute(home, "unix:gid", NOBODY);
        }
        Path socket = home.resolve("i.sock");
        cmd.addAll(List.of(python(), script.toString(), socket.toString(), kase));
        Impostor i = new Impostor(new ProcessBuilder(cmd).redirectErrorStream(true).start(), socket);
        i.awaitLine("listening");
        return i;
    }

    /** The system's python3 (3.9+ for socket.send_fds): a per-user one (pyenv) may not run as another uid. */
    private static String python() {
        return Files.isExecutable(Path.of("/usr/bin/python3")) ? "/usr/bin/python3" : "python3";
    }

    private void read(InputStream in) {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            for (String l = r.readLine(); l != null; l = r.readLine()) {
                synchronized (lines) {
                    lines.add(l);
                    lines.notifyAll();
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Waits up to 15 s for a line containing {@code part} and returns it (each line is returned once). */
    String awaitLine(String part) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        synchronized (lines) {
            while (true) {
                for (int k = 0; k < lines.size(); k++) {
                    if (lines.get(k).contains(part)) {
                        return lines.remove(k);
                    }
                }
                long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                if (left <= 0 || !process.isAlive() && lines.stream().noneMatch(l -> l.contains(part))) {
                    throw new AssertionError("the impostor said no '" + part + "' (alive: " + process.isAlive()
                            + "); it said: " + lines);
                }
                lines.wait(Math.min(left, 100));
            }
        }
    }

    long pid() {
        return process.pid();
    }

    @Override
    public void close() throws Exception {
        process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        Files.deleteIfExists(socket);
    }
}
