package io.engramhost.os;

/**
 * A file descriptor used here but owned elsewhere: by an {@link Fd} ({@link Fd#borrow()}), or by code
 * that holds only the raw number ({@link #of(int, String)}). It cannot close or release the fd, so
 * one fd never has two owners. A view of an {@link Fd} refuses use once that owner is closed; a view of
 * a raw number trusts its caller to keep the owner open while it is used.
 */
public final class BorrowedFd implements FdRef {
    private final Fd owner;
    private final int raw;
    private final String what;

    private BorrowedFd(Fd owner, int raw, String what) {
        this.owner = owner;
        this.raw = raw;
        this.what = what;
    }

    static BorrowedFd of(Fd owner) {
        return new BorrowedFd(owner, -1, owner.what());
    }

    /** A view of {@code raw}, which the caller owns and keeps open while the view is used. */
    public static BorrowedFd of(int raw, String what) {
        if (raw < 0) {
            throw new IllegalArgumentException("not a file descriptor: " + raw + " (" + what + ")");
        }
        return new BorrowedFd(null, raw, what);
    }

    @Override
    public int get() {
        return owner != null ? owner.get() : raw;
    }

    @Override
    public String what() {
        return what;
    }

    @Override
    public String toString() {
        return "BorrowedFd[" + what + "=" + (owner != null ? (owner.isOpen() ? owner.get() : "closed") : raw) + "]";
    }
}
