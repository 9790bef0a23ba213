package io.engramhost.os.internal;

import jnr.ffi.Pointer;
import jnr.ffi.annotations.SaveError;

/**
 * The libc calls engram-host makes beyond a client's import ({@link LibC}): the daemon's (memfds, its listening
 * socket and poll loop, the files next to its socket, CPU placement, NUMA syscalls) and the checkpoint readers'.
 * Bound on first use ({@link LibCMoreHolder}), so that a client that only imports never binds them. Use
 * {@link io.engramhost.os.Posix} and the other checked wrappers of {@link io.engramhost.os}.
 */
@SaveError
public interface LibCMore {
    int memfd_create(String name, int flags);

    int ftruncate(int fd, long length);

    int madvise(long addr, long length, int advice);

    /** Returns 0 or an error number (it does not set errno). */
    int posix_fadvise(int fd, long offset, long length, int advice);

    int mincore(long addr, long length, long vec);

    long pread(int fd, long buf, long count, long offset);

    long pwrite(int fd, long buf, long count, long offset);

    int open(String path, int flags, int mode);

    int flock(int fd, int operation);

    int socketpair(int domain, int type, int protocol, int[] sv);

    int getsockname(int fd, Pointer addr, Pointer addrlen);

    int bind(int fd, Pointer addr, int addrlen);

    int listen(int fd, int backlog);

    long sysconf(int name);

    /** {@code pid} 0: the calling thread. */
    int sched_setaffinity(int pid, long cpusetsize, Pointer mask);

    int getuid();

    int kill(int pid, int signal);


    // The daemon's non-blocking socket loop (io.engramhost.os.NonBlocking).
    int accept4(int fd, Pointer addr, Pointer addrlen, int flags);

    int eventfd(int initval, int flags);

    long read(int fd, Pointer buf, long count);

    long write(int fd, Pointer buf, long count);

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
