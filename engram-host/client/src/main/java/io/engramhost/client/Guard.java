package io.engramhost.client;

import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Keeps mapped memory alive while anyone reads it: readers {@link #enter()} and {@link #exit()};
 * {@link #close()} forbids new entries, and the release runs once the last reader or open
 * Chronicle view has left. So no read ever touches an unmapped page.
 */
final class Guard {
    private final AtomicInteger users = new AtomicInteger();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicBoolean released = new AtomicBoolean();
    private final Runnable release;
    private final String what;

    Guard(String what, Runnable release) {
        this.what = what;
        this.release = release;
    }

    void enter() {
        users.incrementAndGet();
        if (closed.get()) {
            exit();
            throw new IllegalStateException(what + " is closed");
        }
    }

    void exit() {
        if (users.decrementAndGet() == 0 && closed.get()) {
            releaseOnce();
        }
    }

    boolean isClosed() {
        return closed.get();
    }

    void close() {
        if (closed.compareAndSet(false, true) && users.get() == 0) {
            releaseOnce();
        }
    }

    private void releaseOnce() {
        if (released.compareAndSet(false, true)) {
            release.run();
        }
    }
}
