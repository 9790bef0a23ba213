package io.engramhost.os;

import java.nio.file.Path;

/**
 * Owns one listening Unix socket. {@link #accept(int)} waits with a timeout so that an accept loop
 * can notice a stop. {@link #close()} closes the socket; removing the path is the caller's job.
 */
public final class UnixListener implements AutoCloseable {
    private final Fd fd;
    private final Path path;

    private UnixListener(Fd fd, Path path) {
        this.fd = fd;
        this.path = path;
    }

    /**
     * Binds and listens at {@code path}, which must not exist.
     *
     * @throws NativeException naming bind (or listen) and the kernel's errno: EADDRINUSE when the path
     *     exists, ENOENT when its directory does not, EACCES, ENAMETOOLONG
     */
    public static UnixListener bind(Path path, int backlog) {
        return new UnixListener(UnixSockets.listen(path, backlog), path);
    }

    /**
     * Takes ownership of {@code fd}, a listening socket another process handed over (a predecessor daemon, or
     * systemd's fd store), once it is checked to be a listening SOCK_STREAM Unix socket bound to {@code path};
     * it is made non-blocking and listens again with {@code backlog}, so that clients connecting from now on see
     * this process in SO_PEERCRED, not the one that first listened. On a refusal {@code fd} is closed and the
     * reason thrown.
     */
    public static UnixListener adopt(Fd fd, Path path, int backlog) {
        try {
            String wrong = UnixSockets.notListeningOn(fd, path);
            if (wrong != null) {
                throw new IllegalStateException("refusing the listening socket handed over: " + wrong);
            }
            UnixSockets.setBlocking(fd, false);
            UnixSockets.relisten(fd, path, backlog);
            return new UnixListener(fd, path);
        } catch (RuntimeException e) {
            fd.close();
            throw e;
        }
    }

    public Path path() {
        return path;
    }

    /** The listening socket (non-blocking), which this listener keeps owning; refused once closed. */
    public BorrowedFd fd() {
        return fd.borrow();
    }

    /** The next connection, or null when none arrived within {@code timeoutMillis} (-1: no limit). */
    public UnixConnection accept(int timeoutMillis) {
        if (!fd.isOpen()) {
            throw new IllegalStateException("listening socket " + path + " is closed");
        }
        long deadline = timeoutMillis < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutMillis * 1_000_000L;
        while (true) {
            int wait = timeoutMillis < 0 ? -1
                    : (int) Math.max(0, (deadline - System.nanoTime() + 999_999) / 1_000_000L);
            if (Posix.poll(fd, Posix.POLLIN, wait) != 0) {
                Fd c = UnixSockets.accept(fd, "client of " + path);
                if (c != null) {
                    return new UnixConnection(c, "client of " + path);
                }
            }
            if (System.nanoTime() >= deadline) {
                return null; // nothing, or a connection that was gone before it was accepted
            }
        }
    }

    @Override
    public void close() {
        fd.close();
    }
}
