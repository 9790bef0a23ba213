package io.engramhost.daemon;

import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Who owns a socket path: an exclusive flock on {@code <socket>.lock}, which holds the owner's pid.
 * The kernel drops the lock when the owner dies, so a dead daemon (or a zombie) never blocks a new
 * one, and a live one is never clobbered, unlike a check with {@code kill(pid, 0)} alone.
 */
public final class DaemonLock implements AutoCloseable {
    private final Fd fd;
    private final Path path;

    private DaemonLock(Fd fd, Path path) {
        this.fd = fd;
        this.path = path;
    }

    /** Takes the lock or throws {@link AlreadyRunningException} naming the live owner's pid. */
    public static DaemonLock acquire(Path lockFile, Path socket) {
        Fd fd = Posix.open(lockFile, Posix.O_RDWR | Posix.O_CREAT, 0600);
        try {
            if (!Posix.flock(fd, Posix.LOCK_EX | Posix.LOCK_NB)) {
                throw new AlreadyRunningException(socket, readPid(lockFile));
            }
            Files.writeString(lockFile, Posix.getpid() + "\n", StandardCharsets.US_ASCII);
            return new DaemonLock(fd, lockFile);
        } catch (IOException e) {
            fd.close();
            throw new UncheckedIOException("cannot write lock file " + lockFile + ": " + e, e);
        } catch (RuntimeException e) {
            fd.close();
            throw e;
        }
    }

    /** The pid written in a lock file, or -1 when it holds none. */
    public static int readPid(Path lockFile) {
        try {
            String s = Files.readString(lockFile, StandardCharsets.US_ASCII).trim();
            return s.matches("\\d+") ? Integer.parseInt(s) : -1;
        } catch (IOException e) {
            return -1;
        }
    }

    public Path path() {
        return path;
    }

    @Override
    public void close() {
        fd.close();
    }

    /** A live daemon owns the socket path. */
    public static final class AlreadyRunningException extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final int pid;

        AlreadyRunningException(Path socket, int pid) {
            super("engram-host is already running (pid=" + (pid < 0 ? "unknown" : pid) + ") on " + socket);
            this.pid = pid;
        }

        public int pid() {
            return pid;
        }
    }
}
