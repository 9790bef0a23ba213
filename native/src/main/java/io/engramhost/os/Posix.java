package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;
import static io.engramhost.os.internal.LibCHolder.RUNTIME;
import static io.engramhost.os.internal.LibCMoreHolder.MORE;

import io.engramhost.os.internal.LibCHolder;
import io.engramhost.os.internal.WideCalls;
import java.nio.file.Path;
import java.util.Collection;
import java.util.List;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * Checked wrappers over libc. Every failure throws {@link NativeException} naming the call, what it
 * was for, and errno. Resources come back owned: an {@link Fd}, a {@link Mapping}.
 */
public final class Posix {
    // memfd_create
    public static final int MFD_CLOEXEC = 0x1;
    public static final int MFD_ALLOW_SEALING = 0x2;
    public static final int MFD_HUGETLB = 0x4;
    public static final int MFD_HUGE_2MB = 0x54000000;
    public static final int MFD_HUGE_1GB = 0x78000000;
    // fcntl seals
    public static final int F_ADD_SEALS = 1033;
    public static final int F_GET_SEALS = 1034;
    public static final int F_SEAL_SEAL = 0x1;
    public static final int F_SEAL_SHRINK = 0x2;
    public static final int F_SEAL_GROW = 0x4;
    public static final int F_SEAL_WRITE = 0x8;
    public static final int F_SEAL_FUTURE_WRITE = 0x10;
    public static final int F_GETFD = 1;
    public static final int F_SETFD = 2;
    public static final int FD_CLOEXEC = 1;
    // mmap
    public static final int PROT_NONE = 0;
    public static final int PROT_READ = 1;
    public static final int PROT_WRITE = 2;
    public static final int MAP_SHARED = 0x1;
    public static final int MAP_PRIVATE = 0x2;
    public static final int MAP_FIXED = 0x10;
    public static final int MAP_ANONYMOUS = 0x20;
    public static final int MAP_NORESERVE = 0x4000;
    public static final int MAP_POPULATE = 0x8000;
    public static final int MAP_FIXED_NOREPLACE = 0x100000;
    public static final long MAP_FAILED = -1L;
    // madvise
    public static final int MADV_DONTFORK = 10;
    public static final int MADV_HUGEPAGE = 14;
    public static final int MADV_POPULATE_READ = 22;
    public static final int MADV_POPULATE_WRITE = 23;
    // open
    public static final int O_RDONLY = 0;
    private static final int F_DUPFD_CLOEXEC = 1030;
    /** O_NONBLOCK (the same on x86-64 and aarch64): an open of a fifo does not wait for a writer. */
    public static final int O_NONBLOCK = 04000;
    public static final int O_RDWR = 2;
    public static final int O_CREAT = 0x40;
    public static final int O_TRUNC = 0x200;
    public static final int O_CLOEXEC = 0x80000;
    public static final int SEEK_END = 2;
    // flock
    public static final int LOCK_SH = 1;
    public static final int LOCK_EX = 2;
    public static final int LOCK_NB = 4;
    public static final int LOCK_UN = 8;
    // poll
    public static final short POLLIN = 0x1;
    public static final short POLLOUT = 0x4;
    public static final short POLLERR = 0x8;
    public static final short POLLHUP = 0x10;
    public static final short POLLNVAL = 0x20;
    // rlimit
    public static final int RLIMIT_NOFILE = 7;
    // sysconf
    private static final int SC_PAGESIZE = 30;

    private Posix() {
    }

    /** The base page size, from sysconf(_SC_PAGESIZE) once: 4 KiB on x86-64; 4, 16 or 64 KiB on aarch64. */
    public static long pageSize() {
        return PageSize.BYTES;
    }

    private static final class PageSize {
        static final long BYTES = read();

        private static long read() {
            long size = MORE.sysconf(SC_PAGESIZE);
            if (size <= 0 || Long.bitCount(size) != 1) {
                throw new IllegalStateException("sysconf(_SC_PAGESIZE) gave " + size + ", not a page size");
            }
            return size;
        }
    }

    private static NativeException fail(String call) {
        return new NativeException(call, LibCHolder.errno());
    }

    /** memfd_create(name, flags); CLOEXEC is always added. */
    public static Fd memfdCreate(String name, int flags) {
        int fd = MORE.memfd_create(name, flags | MFD_CLOEXEC);
        if (fd < 0) {
            int errno = LibCHolder.errno();
            String hint = null;
            if ((flags & MFD_HUGETLB) != 0 && (errno == Errno.EINVAL || errno == Errno.ENOENT)) {
                hint = "hugetlb memfds are not supported on this kernel";
            }
            throw new NativeException("memfd_create(" + name + ")", errno, hint);
        }
        return Fd.adopt(fd, "memfd " + name);
    }

    public static void ftruncate(FdRef fd, long length) {
        if (MORE.ftruncate(fd.get(), length) != 0) {
            throw fail("ftruncate(" + fd.what() + ", " + length + ")");
        }
    }

    public static void addSeals(FdRef fd, int seals) {
        if (LIBC.fcntl(fd.get(), F_ADD_SEALS, seals) != 0) {
            throw fail("fcntl(" + fd.what() + ", F_ADD_SEALS, 0x" + Integer.toHexString(seals) + ")");
        }
    }

    public static int getSeals(FdRef fd) {
        int seals = LIBC.fcntl(fd.get(), F_GET_SEALS, 0);
        if (seals < 0) {
            throw fail("fcntl(" + fd.what() + ", F_GET_SEALS)");
        }
        return seals;
    }

    /** Sets FD_CLOEXEC on {@code fd} (an fd inherited across exec, as systemd passes them, has it clear). */
    /** fcntl(F_DUPFD_CLOEXEC): a second fd of the same open file, owned by the caller. */
    public static Fd dup(FdRef fd) {
        int n = LIBC.fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
        if (n < 0) {
            throw fail("fcntl(" + fd.what() + ", F_DUPFD_CLOEXEC)");
        }
        return Fd.adopt(n, fd.what() + " (a copy)");
    }

    public static void setCloexec(FdRef fd) {
        int flags = LIBC.fcntl(fd.get(), F_GETFD, 0);
        if (flags < 0 || LIBC.fcntl(fd.get(), F_SETFD, flags | FD_CLOEXEC) != 0) {
            throw fail("fcntl(" + fd.what() + ", F_SETFD, FD_CLOEXEC)");
        }
    }

    /**
     * unsetenv(3) in the process's C environment (what a child started by exec would inherit); the JVM's own
     * snapshot ({@link System#getenv}) keeps the variable.
     */
    public static void unsetenv(String name) {
        if (MORE.unsetenv(name) != 0) {
            throw fail("unsetenv(" + name + ")");
        }
    }

    /** True when the fd has FD_CLOEXEC set. */
    public static boolean isCloexec(FdRef fd) {
        int flags = LIBC.fcntl(fd.get(), F_GETFD, 0);
        if (flags < 0) {
            throw fail("fcntl(" + fd.what() + ", F_GETFD)");
        }
        return (flags & FD_CLOEXEC) != 0;
    }

    /** Maps {@code length} bytes of {@code fd} from {@code offset}; the Mapping owns the range. */
    public static Mapping mmap(long length, int prot, int flags, FdRef fd, long offset) {
        return mmapAt(0L, length, prot, flags, fd, offset);
    }

    /** mmap with an address hint (or a fixed address with MAP_FIXED_NOREPLACE). */
    public static Mapping mmapAt(long addr, long length, int prot, int flags, FdRef fd, long offset) {
        if (length <= 0) {
            throw new IllegalArgumentException("mmap of " + (fd == null ? "anonymous memory" : fd.what())
                    + ": length must be positive, was " + length);
        }
        int raw = fd == null ? -1 : fd.get();
        long address = WideCalls.mmap(addr, length, prot, flags, raw, offset);
        if (address == MAP_FAILED) {
            String what = fd == null ? "anonymous" : fd.what();
            throw fail("mmap(" + what + ", len=" + length + ", prot=" + prot + ", flags=0x"
                    + Integer.toHexString(flags) + ", off=" + offset + ")");
        }
        return new Mapping(address, length, fd == null ? "anonymous memory" : fd.what());
    }

    /** A private anonymous read-write mapping. */
    public static Mapping mmapAnonymous(long length, String what) {
        long address = WideCalls.mmap(0L, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0L);
        if (address == MAP_FAILED) {
            throw fail("mmap(" + what + ", anonymous, len=" + length + ")");
        }
        return new Mapping(address, length, what);
    }

    public static void madvise(Mapping mapping, long offset, long length, int advice) {
        if (MORE.madvise(mapping.address() + offset, length, advice) != 0) {
            throw fail("madvise(" + mapping.what() + ", advice=" + advice + ")");
        }
    }



    /**
     * Reads exactly {@code length} bytes at {@code offset} of {@code fd} into native memory at
     * {@code address}, retrying short reads and EINTR. A premature end of file is an error.
     */
    public static void preadFully(FdRef fd, long address, long length, long offset) {
        long done = preadAtMost(fd, address, length, offset);
        if (done < length) {
            throw new NativeException("pread(" + fd.what() + ", off=" + (offset + done) + ")", Errno.EIO,
                    "unexpected end of file after " + (offset + done) + " bytes");
        }
    }

    /**
     * Reads up to {@code length} bytes at {@code offset} into {@code address}, stopping early only at the end of
     * the file; returns the bytes read. For O_DIRECT fds, whose reads end short only there.
     */
    public static long preadAtMost(FdRef fd, long address, long length, long offset) {
        long done = 0;
        while (done < length) {
            long n = MORE.pread(fd.get(), address + done, length - done, offset + done);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                throw new NativeException("pread(" + fd.what() + ", len=" + (length - done) + ", off="
                        + (offset + done) + ")", errno);
            }
            if (n == 0) {
                break;
            }
            done += n;
        }
        return done;
    }

    /** Writes exactly {@code length} bytes from {@code address} to {@code fd} at {@code offset}. */
    public static void pwriteFully(FdRef fd, long address, long length, long offset) {
        long done = 0;
        while (done < length) {
            long n = MORE.pwrite(fd.get(), address + done, length - done, offset + done);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                throw new NativeException("pwrite(" + fd.what() + ", len=" + (length - done) + ")", errno);
            }
            done += n;
        }
    }

    public static Fd open(Path path, int flags, int mode) {
        int fd = MORE.open(path.toString(), flags | O_CLOEXEC, mode);
        if (fd < 0) {
            throw fail("open(" + path + ")");
        }
        return Fd.adopt(fd, path.toString());
    }

    /** The size of a file or memfd (lseek to its end). */
    public static long size(FdRef fd) {
        long size = LIBC.lseek(fd.get(), 0, SEEK_END);
        if (size < 0) {
            throw fail("lseek(" + fd.what() + ", 0, SEEK_END)");
        }
        return size;
    }

    /**
     * flock; with LOCK_NB, returns false when another holder has the lock (EWOULDBLOCK) instead of
     * throwing.
     */
    public static boolean flock(FdRef fd, int operation) {
        while (true) {
            if (MORE.flock(fd.get(), operation) == 0) {
                return true;
            }
            int errno = LibCHolder.errno();
            if (errno == Errno.EINTR) {
                continue;
            }
            if (errno == Errno.EWOULDBLOCK && (operation & LOCK_NB) != 0) {
                return false;
            }
            throw new NativeException("flock(" + fd.what() + ", " + operation + ")", errno);
        }
    }

    /** pidfd_open(pid): an fd that polls readable once the process has exited. */
    public static Fd pidfdOpen(int pid) {
        long fd = WideCalls.syscall(Syscall.PIDFD_OPEN.number(), pid, 0, 0, 0, 0, 0);
        if (fd < 0) {
            throw fail("pidfd_open(" + pid + ")");
        }
        return Fd.adopt((int) fd, "pidfd " + pid);
    }

    /**
     * Waits up to {@code timeoutMillis} (-1: forever) for {@code events} on one fd, retrying EINTR.
     * Returns the revents, 0 on timeout.
     */
    public static int poll(FdRef fd, int events, int timeoutMillis) {
        Pointer pfd = Memory.allocateDirect(RUNTIME, 8, true);
        long deadline = timeoutMillis < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutMillis * 1_000_000L;
        while (true) {
            pfd.putInt(0, fd.get());
            pfd.putShort(4, (short) events);
            pfd.putShort(6, (short) 0);
            int wait = timeoutMillis < 0 ? -1
                    : (int) Math.max(0, (deadline - System.nanoTime() + 999_999) / 1_000_000L);
            int n = LIBC.poll(pfd, 1, wait);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                throw new NativeException("poll(" + fd.what() + ")", errno);
            }
            return n == 0 ? 0 : pfd.getShort(6) & 0xffff;
        }
    }

    /**
     * Waits up to {@code timeoutMillis} for {@code events} on any of {@code fds}, retrying EINTR.
     * Returns each fd's revents, in the order given (all 0 on timeout).
     */
    public static short[] pollAll(List<? extends FdRef> fds, int events, int timeoutMillis) {
        int[] raw = new int[fds.size()];
        for (int i = 0; i < raw.length; i++) {
            raw[i] = fds.get(i).get();
        }
        return pollAll(raw, events, timeoutMillis);
    }

    /**
     * Waits up to {@code timeoutMillis} for {@code events} on any of {@code fds} (raw numbers the
     * caller owns), retrying EINTR. Returns each fd's revents (all 0 on timeout).
     */
    public static short[] pollAll(int[] fds, int events, int timeoutMillis) {
        short[] revents = new short[fds.length];
        if (fds.length == 0) {
            if (timeoutMillis > 0) {
                try {
                    Thread.sleep(timeoutMillis);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return revents;
        }
        Pointer pfds = Memory.allocateDirect(RUNTIME, 8L * fds.length, true);
        for (int i = 0; i < fds.length; i++) {
            pfds.putInt(8L * i, fds[i]);
            pfds.putShort(8L * i + 4, (short) events);
        }
        while (true) {
            int n = LIBC.poll(pfds, fds.length, timeoutMillis);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                throw new NativeException("poll(" + fds.length + " fds)", errno);
            }
            for (int i = 0; i < fds.length; i++) {
                revents[i] = pfds.getShort(8L * i + 6);
            }
            return revents;
        }
    }

    /** Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the new soft limit. */
    public static long raiseNoFileLimit() {
        Pointer rl = Memory.allocateDirect(RUNTIME, 16, true);
        if (LIBC.getrlimit(RLIMIT_NOFILE, rl) != 0) {
            throw fail("getrlimit(RLIMIT_NOFILE)");
        }
        long soft = rl.getLong(0);
        long hard = rl.getLong(8);
        if (soft < hard) {
            rl.putLong(0, hard);
            if (LIBC.setrlimit(RLIMIT_NOFILE, rl) != 0) {
                throw fail("setrlimit(RLIMIT_NOFILE, " + hard + ")");
            }
            return hard;
        }
        return soft;
    }

    public static int getpid() {
        return LIBC.getpid();
    }

    public static int getuid() {
        return MORE.getuid();
    }

    /** The effective uid: the one SO_PEERCRED reports to a peer, and the one a process acts as. */
    public static int geteuid() {
        return LIBC.geteuid();
    }

    /**
     * Runs the calling thread on {@code cpus} only ({@code sched_setaffinity(0, ...)}): a load thread then
     * touches memory from the node it fills.
     */
    public static void setThreadAffinity(Collection<Integer> cpus) {
        int max = cpus.stream().mapToInt(Integer::intValue).max().orElseThrow(() ->
                new IllegalArgumentException("no CPUs to run on"));
        int bytes = (max / 64 + 1) * 8;
        Pointer mask = Memory.allocateDirect(LibCHolder.RUNTIME, bytes, true);
        for (int c : cpus) {
            mask.putByte(c / 8, (byte) (mask.getByte(c / 8) | (1 << (c % 8))));
        }
        if (MORE.sched_setaffinity(0, bytes, mask) != 0) {
            throw fail("sched_setaffinity(0, CPUs " + cpus + ")");
        }
    }

    /** kill(pid, signal); false when no such process is left (ESRCH). */
    public static boolean kill(int pid, int signal) {
        if (MORE.kill(pid, signal) == 0) {
            return true;
        }
        int errno = LibCHolder.errno();
        if (errno == Errno.ESRCH) {
            return false;
        }
        throw fail("kill(" + pid + ", " + signal + ")");
    }

    /** kill(pid, 0): true when a process with this pid exists (it may be a zombie). */
    public static boolean processExists(int pid) {
        if (MORE.kill(pid, 0) == 0) {
            return true;
        }
        return LibCHolder.errno() == Errno.EPERM;
    }

    /** A raw syscall; returns the result, or throws naming {@code call} when it is negative. */
    public static long syscall(String call, Syscall number, long a1, long a2, long a3, long a4, long a5, long a6) {
        long r = WideCalls.syscall(number.number(), a1, a2, a3, a4, a5, a6);
        if (r < 0) {
            throw fail(call);
        }
        return r;
    }

    /** A raw syscall; returns the result, or -errno when it failed. */
    public static long syscallErrno(Syscall number, long a1, long a2, long a3, long a4, long a5, long a6) {
        long r = WideCalls.syscall(number.number(), a1, a2, a3, a4, a5, a6);
        return r < 0 ? -LibCHolder.errno() : r;
    }

}
