package io.engramhost.os;

/**
 * A file descriptor a native call may use: an owned {@link Fd}, or a {@link BorrowedFd} view of one
 * owned elsewhere. Nothing reached through this type closes the fd: only its owner does.
 */
public sealed interface FdRef permits Fd, BorrowedFd {
    /** The raw number, for a native call; throws {@link IllegalStateException} once the owner closed it. */
    int get();

    /** What the fd is, for messages: {@code memfd engram.t14}, {@code connection to /run/x.sock}. */
    String what();
}
