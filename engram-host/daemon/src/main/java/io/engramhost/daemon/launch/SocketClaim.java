package io.engramhost.daemon.launch;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.SocketPaths;
import java.nio.file.Path;
import java.util.Set;

/**
 * How a daemon claims its socket path, whichever way it starts: the socket's directory checked once
 * ({@link RuntimeDir}), the lock taken ({@link DaemonLock}), then the listening socket, one it was handed or one it
 * binds. The one place that does either.
 */
public final class SocketClaim {
    private static final System.Logger LOG = System.getLogger(SocketClaim.class.getName());
    /** How long a successor whose predecessor died before its commit waits for the lock to go with it. */
    private static final long ORPHAN_LOCK_WAIT_MILLIS = 5_000;

    private SocketClaim() {
    }

    /**
     * Takes the lock of {@code socket} in its checked directory.
     *
     * @throws DaemonLock.AlreadyRunningException when a live daemon holds it
     */
    public static DaemonLock lock(Path socket, Set<Integer> admitted) {
        return DaemonLock.acquire(RuntimeDir.prepare(socket.getParent(), admitted), socket);
    }

    /** A lock a predecessor handed over with its fd, which {@link DaemonLock#adopt} checks and owns. */
    public static DaemonLock adopt(Fd lockFd, Path socket, Set<Integer> admitted) {
        RuntimeDir dir;
        try {
            dir = RuntimeDir.prepare(socket.getParent(), admitted);
        } catch (RuntimeException e) {
            lockFd.close();
            throw e;
        }
        return DaemonLock.adopt(lockFd, dir, socket);
    }

    /**
     * {@link #lock}, waiting a little while a dying daemon still holds it (its lock goes with its last fd): for a
     * successor whose predecessor stopped answering before its commit.
     */
    public static DaemonLock lockAfter(int predecessor, Path socket, Set<Integer> admitted) throws InterruptedException {
        long deadline = System.nanoTime() + ORPHAN_LOCK_WAIT_MILLIS * 1_000_000L;
        while (true) {
            try {
                return lock(socket, admitted);
            } catch (DaemonLock.AlreadyRunningException e) {
                if (System.nanoTime() > deadline || e.pid() != predecessor && e.pid() > 0) {
                    throw e;
                }
                Thread.sleep(50);
            }
        }
    }

    /** The listening socket's backlog, bound or adopted. */
    public static final int BACKLOG = 4096;

    /**
     * The listening socket, once {@code lock} is held: {@code handed} (from systemd's fd store or a socket unit)
     * when it listens on {@code socket} and the file there is a socket (the previous daemon left it for the
     * clients queued in the backlog); otherwise a stale socket there is removed (anything else is refused) and a new
     * socket bound. A stale ready file is removed first (one not in the daemon's format is refused). Owns
     * {@code handed} (null: none).
     */
    public static UnixListener listen(DaemonLock lock, Path socket, Fd handed, Set<Integer> admitted) {
        String name = socket.getFileName().toString();
        lock.dir().clearReady(SocketPaths.readyFile(socket).getFileName().toString());
        if (handed != null) {
            FileStat st = lock.dir().fd().statAt(name);
            if (st != null && st.isSocket() && st.uid() == Posix.geteuid()) {
                try {
                    UnixListener l = UnixListener.adopt(handed, socket, BACKLOG);
                    LOG.log(INFO, "serving on the listening socket systemd passed (" + socket + "): clients queued"
                            + " in its backlog are served");
                    return l;
                } catch (RuntimeException e) {
                    LOG.log(WARNING, e.getMessage() + "; binding a new one");
                }
            } else {
                handed.close();
                LOG.log(WARNING, "the listening socket systemd passed is bound to " + socket + ", which is "
                        + (st == null ? "gone" : "not this daemon's socket") + ": binding a new one");
            }
        }
        lock.dir().clearSocket(name);
        UnixListener l = UnixListener.bind(socket, BACKLOG); // fails (EADDRINUSE) on anything planted since: never follows it
        try {
            lock.dir().protectSocket(name, !admitted.isEmpty());
        } catch (RuntimeException e) {
            l.close();
            lock.dir().removeOwn(name, true);
            throw e;
        }
        return l;
    }
}
