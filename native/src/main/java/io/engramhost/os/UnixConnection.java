package io.engramhost.os;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import jnr.unixsocket.Credentials;
import jnr.unixsocket.UnixSocketAddress;
import jnr.unixsocket.UnixSocketChannel;
import jnr.unixsocket.UnixSocketOptions;

/**
 * Owns one connected SOCK_STREAM Unix socket (a jnr-unixsocket channel) and sends and receives
 * {@link FdMessages} over it. {@link #close()} is idempotent.
 */
public final class UnixConnection implements AutoCloseable {
    private final UnixSocketChannel channel;
    private final String peer;
    private final AtomicBoolean closed = new AtomicBoolean();

    UnixConnection(UnixSocketChannel channel, String peer) {
        this.channel = channel;
        this.peer = peer;
    }

    /**
     * Connects to the socket at {@code path}.
     *
     * @throws NativeException naming connect and errno (ENOENT: no socket; ECONNREFUSED: nobody listens)
     */
    public static UnixConnection connect(Path path) {
        try {
            UnixSocketChannel ch = UnixSocketChannel.open(new UnixSocketAddress(path.toFile()));
            return new UnixConnection(ch, path.toString());
        } catch (IOException e) {
            throw connectFailure(path, e);
        }
    }

    private static NativeException connectFailure(Path path, IOException e) {
        String m = String.valueOf(e.getMessage());
        int errno = m.contains("No such file") ? Errno.ENOENT
                : m.contains("refused") ? Errno.ECONNREFUSED
                : m.contains("ermission") ? Errno.EACCES : Errno.EIO;
        return new NativeException("connect(" + path + ")", errno);
    }

    /** A connected pair, for tests and baselines. */
    public static UnixConnection[] pair(String name) {
        try {
            UnixSocketChannel[] p = UnixSocketChannel.pair();
            return new UnixConnection[] {new UnixConnection(p[0], name + "[0]"), new UnixConnection(p[1], name + "[1]")};
        } catch (IOException e) {
            throw new NativeException("socketpair(" + name + ")", Errno.EIO, e.getMessage());
        }
    }

    public String peer() {
        return peer;
    }

    /** The raw fd, for poll; owned by this connection. */
    public int rawFd() {
        if (closed.get()) {
            throw new IllegalStateException("connection to " + peer + " is closed");
        }
        return channel.getFD();
    }

    /** SO_PEERCRED: the pid, uid and gid of the peer process at connect time. */
    public PeerCredentials peerCredentials() {
        try {
            Credentials c = channel.getOption(UnixSocketOptions.SO_PEERCRED);
            return new PeerCredentials(c.getPid(), c.getUid(), c.getGid());
        } catch (IOException e) {
            throw new NativeException("getsockopt(" + peer + ", SO_PEERCRED)", Errno.EIO, e.getMessage());
        }
    }

    public void send(ByteBuffer payload, List<Fd> fds) {
        FdMessages.send(rawFd(), peer, payload, fds);
    }

    public FdMessages.Received receive(int maxPayload, int maxFds, int timeoutMillis) {
        return FdMessages.receive(rawFd(), peer, maxPayload, maxFds, timeoutMillis);
    }

    /**
     * Waits up to {@code timeoutMillis} for the peer to hang up or send; true when the socket is
     * readable or hung up (the caller then reads to tell which).
     */
    public boolean awaitReadable(int timeoutMillis) {
        Fd view = Fd.adopt(rawFd(), "connection to " + peer);
        try {
            return Posix.poll(view, Posix.POLLIN, timeoutMillis) != 0;
        } finally {
            view.release();
        }
    }

    /**
     * Shuts both directions down without closing the fd: the peer sees EOF, and a thread polling this
     * socket wakes at once (POLLHUP). Lets an owner stop its poller before it closes the fd.
     */
    public void shutdown() {
        try {
            channel.shutdownInput();
        } catch (IOException e) {
            // already shut down, or the peer is gone
        }
        shutdownOutput();
    }

    /** Half-closes the writing side: the peer sees EOF. */
    public void shutdownOutput() {
        try {
            channel.shutdownOutput();
        } catch (IOException e) {
            // already closed by the peer: nothing to shut down
        }
    }

    public boolean isOpen() {
        return !closed.get();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            try {
                channel.close();
            } catch (IOException e) {
                throw new NativeException("close(connection to " + peer + ")", Errno.EIO, e.getMessage());
            }
        }
    }
}
