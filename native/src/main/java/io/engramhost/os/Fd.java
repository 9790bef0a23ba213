package io.engramhost.os;

import io.engramhost.os.internal.LibCHolder;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Owns one file descriptor. {@link #close()} closes it once; a second close does nothing.
 * Using a closed Fd throws rather than touching a number the kernel may have reused.
 */
public final class Fd implements FdRef, AutoCloseable {
    private static final int CLOSED = -1;
    private static final AtomicInteger OPEN = new AtomicInteger();

    private final AtomicInteger fd;
    private final String what;

    private Fd(int fd, String what) {
        if (fd < 0) {
            throw new IllegalArgumentException("not a file descriptor: " + fd + " (" + what + ")");
        }
        this.fd = new AtomicInteger(fd);
        this.what = what;
        OPEN.incrementAndGet();
    }

    /** Takes ownership of {@code fd}; {@code what} names it in messages. */
    public static Fd adopt(int fd, String what) {
        return new Fd(fd, what);
    }

    /** The raw number, for a native call. Throws once closed. */
    @Override
    public int get() {
        int v = fd.get();
        if (v == CLOSED) {
            throw new IllegalStateException("fd of " + what + " is closed");
        }
        return v;
    }

    @Override
    public String what() {
        return what;
    }

    /** A view of this fd for code that uses it but must not close it; it refuses use once this Fd is closed. */
    public BorrowedFd borrow() {
        return BorrowedFd.of(this);
    }

    public boolean isOpen() {
        return fd.get() != CLOSED;
    }

    /** Gives the raw number up to a new owner; this Fd no longer closes it. */
    public int release() {
        int v = fd.getAndSet(CLOSED);
        if (v == CLOSED) {
            throw new IllegalStateException("fd of " + what + " is closed");
        }
        OPEN.decrementAndGet();
        return v;
    }

    @Override
    public void close() {
        int v = fd.getAndSet(CLOSED);
        if (v != CLOSED) {
            OPEN.decrementAndGet();
            if (LibCHolder.LIBC.close(v) != 0) {
                int errno = LibCHolder.errno();
                if (errno != Errno.EINTR) {
                    throw new NativeException("close(" + what + ", fd=" + v + ")", errno);
                }
            }
        }
    }

    /** How many Fd objects of this process are open now: a leak check for tests. */
    public static int openCount() {
        return OPEN.get();
    }

    @Override
    public String toString() {
        return "Fd[" + what + "=" + fd.get() + "]";
    }
}
