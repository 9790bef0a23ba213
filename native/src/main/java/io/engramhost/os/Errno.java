package io.engramhost.os;

/** errno numbers the code tests for, and names for any errno in messages. */
public final class Errno {
    public static final int EPERM = 1;
    public static final int ENOENT = 2;
    public static final int ESRCH = 3;
    public static final int EINTR = 4;
    public static final int EIO = 5;
    public static final int EBADF = 9;
    public static final int EAGAIN = 11;
    public static final int ENOMEM = 12;
    public static final int EACCES = 13;
    public static final int EFAULT = 14;
    public static final int EBUSY = 16;
    public static final int EEXIST = 17;
    public static final int ENODEV = 19;
    public static final int EINVAL = 22;
    public static final int ENFILE = 23;
    public static final int EMFILE = 24;
    public static final int ENOSPC = 28;
    public static final int EPIPE = 32;
    public static final int ENAMETOOLONG = 36;
    public static final int ENOSYS = 38;
    public static final int ENOTSOCK = 88;
    public static final int EADDRINUSE = 98;
    public static final int ECONNABORTED = 103;
    public static final int ECONNRESET = 104;
    public static final int EISCONN = 106;
    public static final int ENOTCONN = 107;
    public static final int ECONNREFUSED = 111;
    public static final int EWOULDBLOCK = EAGAIN;

    private Errno() {
    }

    /** {@code EMFILE}, or {@code errno 1234} when the number is unknown. */
    public static String name(int errno) {
        jnr.constants.platform.Errno e = jnr.constants.platform.Errno.valueOf(errno);
        return e == null || e == jnr.constants.platform.Errno.__UNKNOWN_CONSTANT__ ? "errno " + errno : e.name();
    }

    /** {@code EMFILE (Too many open files)}. */
    public static String describe(int errno) {
        jnr.constants.platform.Errno e = jnr.constants.platform.Errno.valueOf(errno);
        if (e == null || e == jnr.constants.platform.Errno.__UNKNOWN_CONSTANT__) {
            return "errno " + errno;
        }
        return e.name() + " (" + e.description() + ")";
    }
}
