package io.engramhost.os;

/**
 * A native call failed. The message names the call, what it was for, and the errno by name and
 * description, e.g. {@code memfd_create(engram.t14) failed: EMFILE (Too many open files)}.
 */
public class NativeException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String call;
    private final int errno;

    public NativeException(String call, int errno) {
        this(call, errno, null);
    }

    public NativeException(String call, int errno, String hint) {
        super(call + " failed: " + Errno.describe(errno) + (hint == null ? "" : "; " + hint));
        this.call = call;
        this.errno = errno;
    }

    /** The call with its context, e.g. {@code mmap(len=4096)}. */
    public String call() {
        return call;
    }

    public int errno() {
        return errno;
    }

    public String errnoName() {
        return Errno.name(errno);
    }
}
