package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;
import static io.engramhost.os.internal.LibCHolder.RUNTIME;
import static io.engramhost.os.internal.LibCMoreHolder.MORE;

import io.engramhost.os.internal.LibCHolder;
import java.util.List;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * Non-blocking socket calls for one poll loop: recvmsg and sendmsg that never wait, a growable
 * pollfd set and an eventfd to wake the loop (accepting is {@link UnixSockets#accept(FdRef, String, boolean)}). Each call names itself and its errno on
 * failure; "would block" is a return value, not an exception.
 */
public final class NonBlocking {
    private static final int EFD_NONBLOCK = 0x800;
    private static final int EFD_CLOEXEC = 0x80000;
    private static final int MSG_DONTWAIT = 0x40;
    private static final int MSG_NOSIGNAL = 0x4000;
    private static final int MSG_CMSG_CLOEXEC = 0x40000000;
    private static final int MSG_CTRUNC = 0x8;
    /** recv's and send's answer when the socket has nothing to give or no room to take. */
    public static final int WOULD_BLOCK = -1;

    private NonBlocking() {
    }

    /**
     * Native memory for one thread's recvmsg and sendmsg calls: the msghdr, the iovec, room for the
     * control data of one batch of fds, and {@code capacity} bytes of data. Not thread-safe.
     */
    public static final class Scratch {
        private final Pointer buf;
        private final int capacity;

        public Scratch(int capacity) {
            this.capacity = capacity;
            this.buf = Memory.allocateDirect(RUNTIME, FdMessages.SCRATCH_HEADER_BYTES + capacity, true);
        }

        public int capacity() {
            return capacity;
        }
    }

    /**
     * Receives what is there, up to {@code len} bytes (and the scratch's capacity), into
     * {@code dst[off..]}. fds that came along are added to {@code fds}, owned: the caller decides
     * whether they were welcome. Returns the byte count, 0 at end of stream, or {@link #WOULD_BLOCK}.
     *
     * @throws PeerClosedException on ECONNRESET
     * @throws NativeException naming recvmsg and its errno, or MSG_CTRUNC (fds lost)
     */
    public static int recv(int fd, Scratch s, byte[] dst, int off, int len, List<Fd> fds) {
        int want = Math.min(len, s.capacity);
        while (true) {
            long n = FdMessages.recvOnce(fd, s.buf, want, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                if (errno == Errno.EAGAIN) {
                    return WOULD_BLOCK;
                }
                if (errno == Errno.ECONNRESET) {
                    throw new PeerClosedException("connection (fd " + fd + ") was reset");
                }
                throw new NativeException("recvmsg(fd " + fd + ")", errno);
            }
            FdMessages.collectFds(s.buf, "fd " + fd, fds);
            if ((FdMessages.msgFlags(s.buf) & MSG_CTRUNC) != 0) {
                throw new NativeException("recvmsg(fd " + fd + ")", Errno.EMFILE,
                        "control data truncated (MSG_CTRUNC): fds were lost");
            }
            FdMessages.copyData(s.buf, dst, off, (int) n);
            return (int) n;
        }
    }

    /**
     * Sends what the socket takes now of {@code src[off, off+len)} (at most the scratch's
     * capacity), with {@code fds} (raw numbers, still owned by the caller; may be empty) on the
     * first byte. Returns the bytes sent (the fds went with any positive count) or
     * {@link #WOULD_BLOCK}.
     *
     * @throws PeerClosedException on EPIPE or ECONNRESET
     */
    public static int send(int fd, Scratch s, byte[] src, int off, int len, int[] fds) {
        int n0 = Math.min(len, s.capacity);
        while (true) {
            long n = FdMessages.sendOnce(fd, s.buf, src, off, n0, fds, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                if (errno == Errno.EAGAIN) {
                    return WOULD_BLOCK;
                }
                if (errno == Errno.EPIPE || errno == Errno.ECONNRESET) {
                    throw new PeerClosedException("sendmsg(fd " + fd + "): " + Errno.describe(errno));
                }
                throw new NativeException("sendmsg(fd " + fd + ", fds=" + fds.length + ")", errno);
            }
            return (int) n;
        }
    }

    /** An eventfd that wakes a poll loop from other threads. */
    public static final class Wakeup implements AutoCloseable {
        private final Fd fd;
        private final Pointer one = Memory.allocateDirect(RUNTIME, 8, true);
        private final Pointer sink = Memory.allocateDirect(RUNTIME, 8, true);

        public Wakeup(String what) {
            int raw = MORE.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            if (raw < 0) {
                throw new NativeException("eventfd(" + what + ")", LibCHolder.errno());
            }
            fd = Fd.adopt(raw, what);
            one.putLong(0, 1L);
        }

        public int fd() {
            return fd.get();
        }

        /** Makes the eventfd readable; safe from any thread. */
        public void signal() {
            if (fd.isOpen() && MORE.write(fd.get(), one, 8) < 0 && LibCHolder.errno() != Errno.EAGAIN) {
                throw new NativeException("write(" + fd.what() + ")", LibCHolder.errno());
            }
        }

        /** Resets it; the poll loop calls this when it woke for it. */
        public void drain() {
            MORE.read(fd.get(), sink, 8);
        }

        @Override
        public void close() {
            fd.close();
        }
    }

    /** A pollfd array that grows as needed; slots are refilled by the loop before every poll. */
    public static final class PollSet {
        private Pointer fds;
        private int capacity;

        public PollSet(int capacity) {
            grow(Math.max(16, capacity));
        }

        private void grow(int n) {
            Pointer p = Memory.allocateDirect(RUNTIME, 8L * n, true);
            if (fds != null) {
                p.transferFrom(0, fds, 0, 8L * capacity);
            }
            fds = p;
            capacity = n;
        }

        public void set(int slot, int fd, int events) {
            if (slot >= capacity) {
                grow(Math.max(slot + 1, capacity * 2));
            }
            fds.putInt(8L * slot, fd);
            fds.putShort(8L * slot + 4, (short) events);
            fds.putShort(8L * slot + 6, (short) 0);
        }

        /** poll(2) over slots [0, n); EINTR counts as "nothing happened". */
        public int poll(int n, int timeoutMillis) {
            int r = LIBC.poll(fds, n, timeoutMillis);
            if (r < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    return 0;
                }
                throw new NativeException("poll(" + n + " fds)", errno);
            }
            return r;
        }

        public int revents(int slot) {
            return fds.getShort(8L * slot + 6) & 0xffff;
        }
    }
}
