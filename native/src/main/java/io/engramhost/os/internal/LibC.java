package io.engramhost.os.internal;

import jnr.ffi.Pointer;
import jnr.ffi.annotations.SaveError;

/**
 * The libc calls engram-host makes, and no others. Package-private to the os layer in spirit:
 * use {@link io.engramhost.os.Posix}, which checks every result and names the call on failure.
 * Addresses are passed as {@code long}; errno is saved after every call.
 */
@SaveError
public interface LibC {
    int memfd_create(String name, int flags);

    int ftruncate(int fd, long length);

    int fcntl(int fd, int cmd, int arg);

    long mmap(long addr, long length, int prot, int flags, int fd, long offset);

    int munmap(long addr, long length);

    int madvise(long addr, long length, int advice);

    /** Returns 0 or an error number (it does not set errno). */
    int posix_fadvise(int fd, long offset, long length, int advice);

    int mincore(long addr, long length, long vec);

    long pread(int fd, long buf, long count, long offset);

    long pwrite(int fd, long buf, long count, long offset);

    int open(String path, int flags, int mode);

    int close(int fd);

    long lseek(int fd, long offset, int whence);

    long sendmsg(int fd, Pointer msghdr, int flags);

    long recvmsg(int fd, Pointer msghdr, int flags);

    int poll(Pointer fds, long nfds, int timeoutMillis);

    int flock(int fd, int operation);

    int socketpair(int domain, int type, int protocol, int[] sv);

    int getsockopt(int fd, int level, int optname, Pointer optval, Pointer optlen);

    int getsockname(int fd, Pointer addr, Pointer addrlen);

    int shutdown(int fd, int how);

    int socket(int domain, int type, int protocol);

    int connect(int fd, Pointer addr, int addrlen);

    int bind(int fd, Pointer addr, int addrlen);

    int listen(int fd, int backlog);

    int getrlimit(int resource, Pointer rlimit);

    int setrlimit(int resource, Pointer rlimit);

    long sysconf(int name);

    int getpid();

    /** {@code pid} 0: the calling thread. */
    int sched_setaffinity(int pid, long cpusetsize, Pointer mask);

    int getuid();

    int kill(int pid, int signal);

    long syscall(long number, long a1, long a2, long a3, long a4, long a5, long a6);

    // The daemon's non-blocking socket loop (io.engramhost.os.NonBlocking).
    int accept4(int fd, Pointer addr, Pointer addrlen, int flags);

    int eventfd(int initval, int flags);

    long read(int fd, Pointer buf, long count);

    long write(int fd, Pointer buf, long count);

    int geteuid();

    int unsetenv(String name);

    // Files next to the daemon's socket, reached through a directory fd without following a symlink
    // (io.engramhost.os.DirFd).
    int openat(int dirfd, String path, int flags, int mode);

    int mkdirat(int dirfd, String path, int mode);

    int unlinkat(int dirfd, String path, int flags);

    int renameat(int olddirfd, String oldpath, int newdirfd, String newpath);

    int statx(int dirfd, String path, int flags, int mask, Pointer statxbuf);

    int fchmod(int fd, int mode);

    int fchmodat(int dirfd, String path, int mode, int flags);

    int fsync(int fd);
}
