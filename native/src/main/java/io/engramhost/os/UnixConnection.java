package io.engramhost.os;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;

/**
 * Owns one connected SOCK_STREAM Unix socket and sends and receives {@link FdMessages} over it.
 * {@link #close()} is idempotent.
 */
public final class UnixConnection implements AutoCloseable {
    private final Fd fd;
    private final String peer;

    UnixConnection(Fd fd, String peer) {
        this.fd = fd;
        this.peer = peer;
    }

    /**
     * Connects to the socket at {@code path}.
     *
     * @throws NativeException naming connect and the kernel's errno (ENOENT: no socket; ECONNREFUSED:
     *     nobody listens; EACCES: no permission; ENAMETOOLONG: the path does not fit a socket address)
     */
    public static UnixConnection connect(Path path) {
        return new UnixConnection(UnixSockets.connect(path), path.toString());
    }

    /** Takes ownership of {@code fd}, a connected SOCK_STREAM Unix socket (one accepted, or handed over). */
    public static UnixConnection of(Fd fd, String peer) {
        return new UnixConnection(fd, peer);
    }

    /** A connected pair, for tests and baselines. */
    public static UnixConnection[] pair(String name) {
        Fd[] p = UnixSockets.pair(name);
        return new UnixConnection[] {new UnixConnection(p[0], name + "[0]"), new UnixConnection(p[1], name + "[1]")};
    }

    public String peer() {
        return peer;
    }

    /** The raw fd, for a native call; owned by this connection. Throws once closed. */
    public int rawFd() {
        return fd.get();
    }

    /** The socket as a fd this connection keeps owning, for poll and the like; refused once closed. */
    public BorrowedFd fd() {
        return fd.borrow();
    }

    /** SO_PEERCRED: the pid, uid and gid of the peer process at connect time. */
    public PeerCredentials peerCredentials() {
        return UnixSockets.peerCredentials(fd);
    }

    public void send(ByteBuffer payload, List<? extends FdRef> fds) {
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
        return Posix.poll(fd, Posix.POLLIN, timeoutMillis) != 0;
    }

    /**
     * Shuts both directions down without closing the fd: the peer sees EOF, and a thread polling this
     * socket wakes at once (POLLHUP). Lets an owner stop its poller before it closes the fd.
     */
    public void shutdown() {
        if (fd.isOpen()) {
            UnixSockets.shutdown(fd, UnixSockets.SHUT_RDWR);
        }
    }

    /** Half-closes the writing side: the peer sees EOF. */
    public void shutdownOutput() {
        if (fd.isOpen()) {
            UnixSockets.shutdown(fd, UnixSockets.SHUT_WR);
        }
    }

    public boolean isOpen() {
        return fd.isOpen();
    }

    @Override
    public void close() {
        fd.close();
    }

    @Override
    public String toString() {
        return "UnixConnection[" + peer + (fd.isOpen() ? "" : ", closed") + "]";
    }
}
