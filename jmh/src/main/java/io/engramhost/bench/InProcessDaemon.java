package io.engramhost.bench;

import io.engramhost.daemon.Daemon;
import io.engramhost.daemon.DaemonContext;
import io.engramhost.daemon.DaemonLauncher;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.store.Catalog;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.function.Supplier;
import java.util.stream.Stream;

/** A ready daemon in this JVM on a socket in a fresh temporary directory; close stops it and removes the directory. */
final class InProcessDaemon implements AutoCloseable {
    private final Path dir;
    private final Daemon daemon;

    private InProcessDaemon(Path dir, Daemon daemon) {
        this.dir = dir;
        this.daemon = daemon;
    }

    static InProcessDaemon start(Supplier<Catalog> catalog) {
        return start(catalog, ConnectionLimits.defaults());
    }

    static InProcessDaemon start(Supplier<Catalog> catalog, ConnectionLimits limits) {
        Path dir;
        try {
            dir = Files.createTempDirectory("engram-bench-");
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create a directory for the benchmark daemon's socket", e);
        }
        DaemonContext context = new DaemonContext().socket(dir.resolve("run/engram.sock")).catalog(p -> catalog.get())
                .numa("none").threads(1).limits(limits);
        Daemon daemon = null;
        try {
            daemon = DaemonLauncher.start(context, DaemonLauncher.Environment.none());
            daemon.awaitReady();
            return new InProcessDaemon(dir, daemon);
        } catch (Exception e) {
            if (daemon != null) {
                daemon.close();
            }
            deleteTree(dir);
            throw new IllegalStateException("cannot start the benchmark daemon in " + dir + ": " + e.getMessage(), e);
        }
    }

    Path socket() {
        return daemon.socket();
    }

    @Override
    public void close() {
        daemon.close();
        deleteTree(dir);
    }

    /** Removes {@code dir} and everything below it. */
    static void deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot remove " + dir, e);
        }
    }
}
