package io.engramhost.os.internal;

import jnr.ffi.Pointer;
import jnr.ffi.annotations.SaveError;

/**
 * The libc calls a client makes to import tables (its socket, the fds and frames it receives, their mappings, its
 * ids and fd limit), bound when the os layer is first used ({@link LibCHolder}). The others engram-host makes are in
 * {@link LibCMore}, bound only when a process first needs one: JNR generates a class per bound interface, at a cost
 * that grows with its methods, and a restarting engine's client pays it before its tables are usable.
 * Package-private to the os layer in spirit: use {@link io.engramhost.os.Posix}, which checks every result and names
 * the call on failure. Addresses are passed as {@code long}; errno is saved after every call.
 */
@SaveError
public interface LibC {
    int fcntl(int fd, int cmd, int arg);


    int munmap(long addr, long length);

    int close(int fd);

    long lseek(int fd, long offset, int whence);

    long sendmsg(int fd, Pointer msghdr, int flags);

    long recvmsg(int fd, Pointer msghdr, int flags);

    int poll(Pointer fds, long nfds, int timeoutMillis);

    int getsockopt(int fd, int level, int optname, Pointer optval, Pointer optlen);

    int shutdown(int fd, int how);

    int socket(int domain, int type, int protocol);

    int connect(int fd, Pointer addr, int addrlen);

    int getrlimit(int resource, Pointer rlimit);

    int setrlimit(int resource, Pointer rlimit);

    int getpid();

    int geteuid();
}
