package io.engramhost.os;

import java.io.IOException;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import jnr.unixsocket.UnixServerSocketChannel;
import jnr.unixsocket.UnixSocketAddress;
import jnr.unixsocket.UnixSocketChannel;

/**
 * Owns one listening Unix socket. {@link #accept(int)} waits with a timeout so that an accept loop
 * can notice a stop. {@link #close()} closes the socket; removing the path is the caller's job.
 */
public final class UnixListener implements AutoCloseable {
    private final UnixServerSocketChannel channel;
    private final Path path;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Fd pollView;

    private UnixListener(UnixServerSocketChannel channel, Path path) {
        this.channel = channel;
        this.path = path;
        this.pollView = Fd.adopt(channel.getFD(), "listening socket " + path);
    }

    /** Binds and listens at {@code path}, which must not exist. */
    public static UnixListener bind(Path path, int backlog) {
        UnixServerSocketChannel ch = null;
        try {
            ch = UnixServerSocketChannel.open();
            ch.configureBlocking(true);
            ch.socket().bind(new UnixSocketAddress(path.toFile()), backlog);
            return new UnixListener(ch, path);
        } catch (IOException e) {
            if (ch != null) {
                try {
                    ch.close();
                } catch (IOException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            String m = String.valueOf(e.getMessage());
            int errno = m.contains("in use") ? Errno.EEXIST : m.contains("ermission") ? Errno.EACCES : Errno.EIO;
            throw new NativeException("bind(" + path + ")", errno, m);
        }
    }

    public Path path() {
        return path;
    }

    /** The next connection, or null when none arrived within {@code timeoutMillis}. */
    public UnixConnection accept(int timeoutMillis) {
        if (closed.get()) {
            throw new IllegalStateException("listening socket " + path + " is closed");
        }
        if (Posix.poll(pollView, Posix.POLLIN, timeoutMillis) == 0) {
            return null;
        }
        try {
            UnixSocketChannel c = channel.accept();
            return c == null ? null : new UnixConnection(c, "client of " + path);
        } catch (IOException e) {
            throw new NativeException("accept(" + path + ")", Errno.EIO, e.getMessage());
        }
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            pollView.release();
            try {
                channel.close();
            } catch (IOException e) {
                throw new NativeException("close(listening socket " + path + ")", Errno.EIO, e.getMessage());
            }
        }
    }
}
