package io.engramhost.daemon.loop;

import java.util.ArrayDeque;
import java.util.function.Consumer;

/**
 * The memory unfinished request payloads may hold, and who gets it, in arrival order (docs/protocol.md, "Request
 * memory"). Two pools:
 * <ul>
 * <li><b>Large</b> messages (a header announcing more than {@value #SMALL_MESSAGE} payload bytes: an IMPORT with a
 * large structured expectation) reserve their whole announced size at once, from {@code --request-memory}, when they
 * are admitted; until then their bytes wait in the socket. They are admitted in the order their headers arrived, and
 * an admitted one always has room to finish, so large requests never deadlock each other.</li>
 * <li><b>Small</b> messages (HELLO, STATUS, BYE, STOP, a small IMPORT) take what arrives from a pool of their own,
 * {@value #SMALL_POOL} bytes that large messages never use, so no large message, however slow, holds up a small
 * one.</li>
 * </ul>
 * Whatever gives memory back (an answered request, a closed connection, a deadline) wakes the waiters that now fit,
 * oldest first. Used by the poll loop's thread only.
 */
final class RequestMemory {
    /** The most payload bytes a small message may announce. */
    static final int SMALL_MESSAGE = 64 << 10;
    /** The bytes small messages share. */
    static final long SMALL_POOL = 8L << 20;

    private final long limit;
    private final Consumer<Connection> woken;
    private final ArrayDeque<Connection> largeWaiting = new ArrayDeque<>();
    private final ArrayDeque<Connection> smallWaiting = new ArrayDeque<>();
    private long large;
    private long small;

    /** {@code limit}: {@code --request-memory}; {@code woken}: told of a waiter that may go on. */
    RequestMemory(long limit, Consumer<Connection> woken) {
        this.limit = limit;
        this.woken = woken;
    }

    /**
     * Admits {@code c}'s large message of {@code size} bytes: true when its reservation is made (now, or earlier by
     * a wake-up); false while it waits its turn (it is queued once, in arrival order).
     */
    boolean admitLarge(Connection c, long size) {
        if (c.inbound.reserved() >= size) {
            return true;
        }
        if (largeWaiting.isEmpty() && large + size <= limit) {
            large += size;
            c.inbound.granted(size);
            return true;
        }
        if (!largeWaiting.contains(c)) {
            largeWaiting.add(c);
        }
        return false;
    }

    /** Takes {@code bytes} more for {@code c}'s small message; false (queued) when the small pool is full. */
    boolean takeSmall(Connection c, long bytes) {
        if (smallWaiting.isEmpty() || smallWaiting.peek() == c) {
            if (small + bytes <= SMALL_POOL) {
                small += bytes;
                smallWaiting.remove(c);
                return true;
            }
        }
        if (!smallWaiting.contains(c)) {
            smallWaiting.add(c);
        }
        return false;
    }

    /** Gives back what {@code c}'s message held ({@code bytes}, in the pool its size says), and wakes who now fits. */
    void give(long bytes, boolean largeMessage) {
        if (largeMessage) {
            large -= bytes;
        } else {
            small -= bytes;
        }
        if (large < 0 || small < 0) {
            throw new IllegalStateException("request memory went negative: " + large + " large, " + small + " small");
        }
        wake();
    }

    /** {@code c} closes: it waits for nothing any more. */
    void forget(Connection c) {
        largeWaiting.remove(c);
        smallWaiting.remove(c);
        wake();
    }

    private void wake() {
        Connection head;
        while ((head = largeWaiting.peek()) != null) {
            long size = head.inbound.announced();
            if (large + size > limit) {
                break;
            }
            largeWaiting.poll();
            large += size;
            head.inbound.granted(size);
            woken.accept(head);
        }
        if (!smallWaiting.isEmpty() && small < SMALL_POOL) {
            woken.accept(smallWaiting.peek()); // it asks again, first in line
        }
    }

    /** Bytes held, both pools together. */
    long used() {
        return large + small;
    }
}
