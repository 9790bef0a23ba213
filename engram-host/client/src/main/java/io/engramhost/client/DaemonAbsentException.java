package io.engramhost.client;

import io.engramhost.os.Errno;
import io.engramhost.protocol.SocketPaths;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;

/**
 * No daemon listens at the path: {@code connect} failed with ENOENT (no socket file) or ECONNREFUSED
 * (a socket file nobody listens on, as a daemon killed with SIGKILL leaves behind). The one case a
 * caller may fall back to a disk load; anything a live daemon says is another {@link EngramClientException}.
 */
public final class DaemonAbsentException extends EngramClientException {
    private static final long serialVersionUID = 1L;
    private final transient Path socket;
    private final int errno;

    /** No socket file at {@code socket} (ENOENT). */
    public DaemonAbsentException(Path socket) {
        this(socket, Errno.ENOENT, null);
    }

    /** {@code connect(socket)} failed with {@code errno}, ENOENT or ECONNREFUSED. */
    public DaemonAbsentException(Path socket, int errno, Throwable cause) {
        super("no engram-host daemon listens on " + socket + " (" + reason(errno) + ")" + hint(socket, errno), cause);
        this.socket = socket;
        this.errno = errno;
    }

    private static String reason(int errno) {
        return errno == Errno.ECONNREFUSED ? "connection refused" : errno == Errno.ENOENT ? "no such socket"
                : Errno.describe(errno);
    }

    private static String hint(Path socket, int errno) {
        if (errno == Errno.ENOENT) {
            return ": start one (engram-host serve), or name the running one's socket with --socket or "
                    + SocketPaths.ENV;
        }
        if (errno == Errno.ECONNREFUSED && !Files.isDirectory(socket)
                && !isSocket(socket)) {
            return ": it is not a socket (a file of some other kind is there): check --socket and " + SocketPaths.ENV;
        }
        return errno == Errno.ECONNREFUSED ? ": the socket file is left from a daemon that is gone; the next daemon"
                + " on this path removes it" : "";
    }

    private static boolean isSocket(Path p) {
        try {
            return ((Number) Files.getAttribute(p, "unix:mode", LinkOption.NOFOLLOW_LINKS))
                    .intValue() >> 12 == 014;
        } catch (IOException | RuntimeException e) {
            return true; // cannot tell: say what a socket left behind would mean
        }
    }

    public Path socket() {
        return socket;
    }

    /** The errno of the failed connect: {@link Errno#ENOENT} or {@link Errno#ECONNREFUSED}. */
    public int errno() {
        return errno;
    }

    /** Why no daemon listens, in a few words: "no such socket" or "connection refused". */
    public String reason() {
        return reason(errno);
    }
}
