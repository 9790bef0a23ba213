package io.engramhost.daemon;

/**
 * The bytes all unfinished request payloads may hold together (--request-memory). Used by the poll
 * loop's thread only; a connection that cannot get more waits until another gives some back.
 */
final class RequestMemory {
    private final long limit;
    private volatile long used;

    RequestMemory(long limit) {
        this.limit = limit;
    }

    boolean take(long bytes) {
        if (used + bytes > limit) {
            return false;
        }
        used += bytes;
        return true;
    }

    void give(long bytes) {
        used -= bytes;
        if (used < 0) {
            throw new IllegalStateException("request memory went negative: " + used);
        }
    }

    long used() {
        return used;
    }
}
