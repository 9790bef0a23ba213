package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;
import static io.engramhost.os.internal.LibCHolder.RUNTIME;
import static io.engramhost.os.internal.LibCMoreHolder.MORE;

import io.engramhost.os.internal.LibCHolder;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * Unix stream sockets made through the project's own libc binding, so that every failure carries
 * the errno the kernel gave (ENOENT, ECONNREFUSED, EACCES, EADDRINUSE...) and every fd is owned.
 * {@link UnixConnection} and {@link UnixListener} are built on these.
 *
 * <p>Layouts (the same on x86-64 and aarch64, LP64 Linux): {@code struct sockaddr_un} is 110 bytes,
 * {@code sa_family_t sun_family} (u16, AF_UNIX = 1) at 0 and {@code char sun_path[108]} at 2;
 * {@code struct ucred} is 12 bytes, {@code pid}, {@code uid}, {@code gid} (int each).
 */
public final class UnixSockets {
    public static final int AF_UNIX = 1;
    public static final int SOCK_STREAM = 1;
    public static final int SOCK_DGRAM = 2;
    public static final int SOCK_NONBLOCK = 0x800;
    public static final int SOCK_CLOEXEC = 0x80000;
    public static final int SHUT_RD = 0;
    public static final int SHUT_WR = 1;
    public static final int SHUT_RDWR = 2;
    /** The size of {@code sun_path}: a path fits when its bytes and a terminating NUL do. */
    public static final int SUN_PATH_BYTES = 108;
    private static final int SUN_PATH_AT = 2;
    private static final int SOL_SOCKET = 1;
    private static final int SO_PEERCRED = 17;
    private static final int SO_TYPE = 3;
    private static final int SO_ACCEPTCONN = 30;
    private static final int F_GETFL = 3;
    private static final int F_SETFL = 4;
    /** The same on x86-64 and aarch64. */
    private static final int O_NONBLOCK = 0x800;
    private static final int SOCKADDR_UN_BYTES = 110;
    private static final int UCRED_BYTES = 12;
    private static final Charset PATH_CHARSET = pathCharset();

    private UnixSockets() {
    }

    /**
     * Connects a SOCK_STREAM socket (CLOEXEC, blocking) to {@code path}.
     *
     * @throws NativeException naming connect, the path and the kernel's errno: ENOENT (no socket
     *     there), ECONNREFUSED (a socket file nobody listens on), EACCES (no permission), ENAMETOOLONG
     *     (the path does not fit sun_path)
     */
    public static Fd connect(Path path) {
        String call = "connect(" + path + ")";
        SockAddr addr = SockAddr.of(path, call);
        Fd fd = socket(0, "connection to " + path, call);
        try {
            while (LIBC.connect(fd.get(), addr.struct(), addr.length()) != 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EISCONN) {
                    break; // an earlier, interrupted attempt completed
                }
                if (errno != Errno.EINTR) {
                    throw new NativeException(call, errno);
                }
            }
            return fd;
        } catch (RuntimeException e) {
            fd.close();
            throw e;
        }
    }

    /**
     * Whether {@code errno}, from {@link #connect}, means that no daemon listens at the path: ENOENT (no socket
     * file there) or ECONNREFUSED (a file nobody listens on: a socket left by a process that is gone, as after a
     * SIGKILL, or a file of another kind). The one mapping every caller uses (the client's "daemon absent", a
     * successor's "no predecessor"); anything else (EACCES, ENOTDIR, ENAMETOOLONG...) is a path or permission to
     * fix, not a missing daemon, so a caller says so instead of loading from disk.
     */
    public static boolean noListener(int errno) {
        return errno == Errno.ENOENT || errno == Errno.ECONNREFUSED;
    }

    /**
     * Binds a non-blocking SOCK_STREAM socket (CLOEXEC) to {@code path}, which must not exist, and
     * listens with {@code backlog}.
     *
     * @throws NativeException naming bind or listen and the kernel's errno: EADDRINUSE (the path exists),
     *     ENOENT (no such directory), EACCES, ENAMETOOLONG
     */
    public static Fd listen(Path path, int backlog) {
        String call = "bind(" + path + ")";
        SockAddr addr = SockAddr.of(path, call);
        Fd fd = socket(SOCK_NONBLOCK, "listening socket " + path, call);
        try {
            if (MORE.bind(fd.get(), addr.struct(), addr.length()) != 0) {
                throw new NativeException(call, LibCHolder.errno());
            }
            if (MORE.listen(fd.get(), backlog) != 0) {
                throw new NativeException("listen(" + path + ", " + backlog + ")", LibCHolder.errno());
            }
            return fd;
        } catch (RuntimeException e) {
            fd.close();
            throw e;
        }
    }

    /**
     * {@code listen(2)} again on a socket that listens already, as its new owner: the kernel records the credentials
     * that SO_PEERCRED gives connecting clients when {@code listen} is called, so a listening socket handed to a
     * successor (a takeover, systemd's fd store) would otherwise show clients the process that first listened.
     */
    public static void relisten(FdRef listener, Path path, int backlog) {
        if (MORE.listen(listener.get(), backlog) != 0) {
            throw new NativeException("listen(" + path + ", " + backlog + ") of the listening socket handed over",
                    LibCHolder.errno());
        }
    }

    /**
     * Accepts one connection on the non-blocking listening socket {@code listener}: a blocking socket
     * (CLOEXEC) named {@code what}, or null when none is waiting (EAGAIN) or the one waiting was aborted.
     */
    public static Fd accept(FdRef listener, String what) {
        return accept(listener, what, false);
    }

    /** As {@link #accept(FdRef, String)}; with {@code nonBlocking} the accepted socket is O_NONBLOCK too. */
    public static Fd accept(FdRef listener, String what, boolean nonBlocking) {
        while (true) {
            int fd = MORE.accept4(listener.get(), null, null, SOCK_CLOEXEC | (nonBlocking ? SOCK_NONBLOCK : 0));
            if (fd >= 0) {
                return Fd.adopt(fd, what);
            }
            int errno = LibCHolder.errno();
            if (errno == Errno.EINTR) {
                continue;
            }
            if (errno == Errno.EAGAIN || errno == Errno.ECONNABORTED) {
                return null;
            }
            throw new NativeException("accept(" + listener.what() + ")", errno);
        }
    }

    /** An unbound SOCK_DGRAM Unix socket (CLOEXEC, blocking) to send datagrams from ({@link #sendDatagram}). */
    public static Fd datagram(String what) {
        int fd = LIBC.socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            throw new NativeException("socket(AF_UNIX, SOCK_DGRAM) for " + what, LibCHolder.errno());
        }
        return Fd.adopt(fd, what);
    }

    /**
     * Sends one datagram from {@code socket} ({@link #datagram}) to {@code address}: a path, or a name in the
     * abstract namespace when it starts with {@code @} (as systemd writes {@code NOTIFY_SOCKET}). {@code fds}
     * (raw numbers, at most {@link FdMessages#MAX_FDS_PER_SENDMSG}: one of {@link FdMessages#batches}) ride along as
     * SCM_RIGHTS; the caller keeps owning them.
     *
     * It never waits: false when the receiver's queue is full (EAGAIN), and nothing was sent.
     *
     * @throws NativeException naming sendmsg and the kernel's errno (ENOENT, ECONNREFUSED...)
     */
    public static boolean sendDatagram(FdRef socket, String address, byte[] data, int[] fds) {
        String call = "sendmsg(" + address + ")";
        SockAddr addr = address.startsWith("@") ? SockAddr.abstractName(address.substring(1), call)
                : SockAddr.of(Path.of(address), call);
        return FdMessages.sendDatagram(socket.get(), addr.struct(), addr.length(), data, fds, address);
    }

    /** A connected pair of SOCK_STREAM sockets (CLOEXEC), named {@code name[0]} and {@code name[1]}. */
    public static Fd[] pair(String name) {
        int[] sv = new int[2];
        if (MORE.socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            throw new NativeException("socketpair(" + name + ")", LibCHolder.errno());
        }
        return new Fd[] {Fd.adopt(sv[0], name + "[0]"), Fd.adopt(sv[1], name + "[1]")};
    }

    /** SO_PEERCRED: the pid, uid and gid of the process that connected {@code socket}'s peer. */
    public static PeerCredentials peerCredentials(FdRef socket) {
        Pointer cred = Memory.allocateDirect(RUNTIME, UCRED_BYTES, true);
        Pointer len = Memory.allocateDirect(RUNTIME, 4, true);
        len.putInt(0, UCRED_BYTES);
        if (LIBC.getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, cred, len) != 0) {
            throw new NativeException("getsockopt(" + socket.what() + ", SO_PEERCRED)", LibCHolder.errno());
        }
        return new PeerCredentials(cred.getInt(0), cred.getInt(4), cred.getInt(8));
    }

    /** Clears or sets O_NONBLOCK (a socket received from another process keeps the sender's mode). */
    public static void setBlocking(FdRef socket, boolean blocking) {
        int flags = LIBC.fcntl(socket.get(), F_GETFL, 0);
        if (flags < 0) {
            throw new NativeException("fcntl(" + socket.what() + ", F_GETFL)", LibCHolder.errno());
        }
        int want = blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK;
        if (want != flags && LIBC.fcntl(socket.get(), F_SETFL, want) != 0) {
            throw new NativeException("fcntl(" + socket.what() + ", F_SETFL)", LibCHolder.errno());
        }
    }

    /**
     * Why {@code fd} is not a listening SOCK_STREAM Unix socket bound to {@code path}, or null when it is one: for a
     * socket handed over by another process, which is checked before it is served on.
     */
    public static String notListeningOn(FdRef fd, Path path) {
        Integer type = intOption(fd, SO_TYPE);
        if (type == null) {
            return fd.what() + " is not a socket";
        }
        if (type != SOCK_STREAM) {
            return fd.what() + " is a socket of type " + type + ", not SOCK_STREAM";
        }
        Integer listening = intOption(fd, SO_ACCEPTCONN);
        if (listening == null || listening == 0) {
            return fd.what() + " is a socket that does not listen";
        }
        Pointer addr = Memory.allocateDirect(RUNTIME, SOCKADDR_UN_BYTES, true);
        Pointer len = Memory.allocateDirect(RUNTIME, 4, true);
        len.putInt(0, SOCKADDR_UN_BYTES);
        if (MORE.getsockname(fd.get(), addr, len) != 0) {
            return "getsockname(" + fd.what() + ") failed: " + Errno.describe(LibCHolder.errno());
        }
        if ((addr.getShort(0) & 0xffff) != AF_UNIX) {
            return fd.what() + " is not a Unix socket (family " + (addr.getShort(0) & 0xffff) + ")";
        }
        int n = Math.max(0, Math.min(len.getInt(0), SOCKADDR_UN_BYTES) - SUN_PATH_AT);
        byte[] raw = new byte[n];
        addr.get(SUN_PATH_AT, raw, 0, n);
        int end = 0;
        while (end < n && raw[end] != 0) {
            end++;
        }
        String bound = new String(raw, 0, end, PATH_CHARSET);
        if (!bound.equals(path.toString())) {
            return fd.what() + " listens on '" + bound + "', not on " + path;
        }
        return null;
    }

    /** An int socket option, or null when {@code fd} is no socket (ENOTSOCK) or the call fails. */
    private static Integer intOption(FdRef fd, int option) {
        Pointer v = Memory.allocateDirect(RUNTIME, 4, true);
        Pointer len = Memory.allocateDirect(RUNTIME, 4, true);
        len.putInt(0, 4);
        if (LIBC.getsockopt(fd.get(), SOL_SOCKET, option, v, len) != 0) {
            return null;
        }
        return v.getInt(0);
    }

    /**
     * shutdown(2) with {@link #SHUT_RD}, {@link #SHUT_WR} or {@link #SHUT_RDWR}; a socket whose peer is
     * already gone (ENOTCONN) is left as it is.
     */
    public static void shutdown(FdRef socket, int how) {
        if (LIBC.shutdown(socket.get(), how) != 0) {
            int errno = LibCHolder.errno();
            if (errno != Errno.ENOTCONN) {
                throw new NativeException("shutdown(" + socket.what() + ", " + how + ")", errno);
            }
        }
    }

    private static Fd socket(int flags, String what, String call) {
        int fd = LIBC.socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
        if (fd < 0) {
            throw new NativeException("socket(AF_UNIX, SOCK_STREAM) for " + call, LibCHolder.errno());
        }
        return Fd.adopt(fd, what);
    }

    /** A {@code struct sockaddr_un} and the length to pass with it (family, path and its NUL). */
    private record SockAddr(Pointer struct, int length) {
        /** The address of {@code path}, or ENAMETOOLONG naming it (as {@code call}) when sun_path cannot hold it. */
        static SockAddr of(Path path, String call) {
            byte[] bytes = path.toString().getBytes(PATH_CHARSET);
            if (bytes.length + 1 > SUN_PATH_BYTES) {
                throw new NativeException(call, Errno.ENAMETOOLONG, "the socket path is " + bytes.length
                        + " bytes; a Unix socket path holds at most " + (SUN_PATH_BYTES - 1) + " (sun_path is "
                        + SUN_PATH_BYTES + " bytes with its NUL): choose a shorter path or directory");
            }
            for (byte b : bytes) {
                if (b == 0) {
                    throw new IllegalArgumentException(call + ": the socket path contains a NUL byte");
                }
            }
            Pointer struct = Memory.allocateDirect(RUNTIME, SUN_PATH_AT + SUN_PATH_BYTES, true);
            struct.putShort(0, (short) AF_UNIX);
            struct.put(SUN_PATH_AT, bytes, 0, bytes.length);
            return new SockAddr(struct, SUN_PATH_AT + bytes.length + 1);
        }

        /** The abstract-namespace address {@code name}: sun_path is a NUL and the name's bytes, with no NUL after. */
        static SockAddr abstractName(String name, String call) {
            byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
            if (bytes.length + 1 > SUN_PATH_BYTES) {
                throw new NativeException(call, Errno.ENAMETOOLONG, "the abstract socket name is " + bytes.length
                        + " bytes; at most " + (SUN_PATH_BYTES - 1));
            }
            Pointer struct = Memory.allocateDirect(RUNTIME, SUN_PATH_AT + SUN_PATH_BYTES, true);
            struct.putShort(0, (short) AF_UNIX);
            struct.put(SUN_PATH_AT + 1, bytes, 0, bytes.length);
            return new SockAddr(struct, SUN_PATH_AT + 1 + bytes.length);
        }
    }

    /** The charset the JVM uses for file names ({@code sun.jnu.encoding}), so a path means the same file. */
    private static Charset pathCharset() {
        try {
            return Charset.forName(System.getProperty("sun.jnu.encoding", "UTF-8"));
        } catch (RuntimeException e) {
            return StandardCharsets.UTF_8;
        }
    }
}
