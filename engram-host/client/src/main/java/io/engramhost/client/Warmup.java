package io.engramhost.client;

import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.Hello;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A fresh JVM spends about a quarter of a second initialising Chronicle Bytes (the codec) and
 * longer loading the native bindings. A restarting client starts the codec's initialisation in a
 * background thread first thing, so the two overlap instead of adding up; the same thread then
 * readies the SHA-256 that checks the manifest's fingerprint (the JDK's security providers, some
 * milliseconds when nothing in the process has used them). (Warming jnr-unixsocket in a third
 * thread was measured slower: the bindings contend.) Idempotent; costs nothing once warm.
 */
final class Warmup {
    private static final AtomicBoolean STARTED = new AtomicBoolean();
    private static volatile Thread thread;

    private Warmup() {
    }

    static void start() {
        if (STARTED.compareAndSet(false, true)) {
            spawn("engram-warmup-codec", () -> {
                FrameReader.of(new Hello(1, 1, 0, "warm-up").encode());
                try {
                    MessageDigest.getInstance("SHA-256").digest(new byte[0]);
                } catch (NoSuchAlgorithmException e) {
                    // the manifest's check reports it
                }
            });
        }
    }

    /**
     * Waits up to {@code millis} for a started warm-up to end. A process about to exit calls it: a warm-up still
     * initialising Chronicle when the JVM shuts down makes Chronicle print a "Shutdown in progress" trace.
     */
    static void await(long millis) {
        Thread t = thread;
        if (t == null) {
            return;
        }
        try {
            t.join(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void spawn(String name, Runnable r) {
        Thread t = new Thread(() -> {
            try {
                r.run();
            } catch (RuntimeException | LinkageError ignored) {
                // a warm-up only saves time: the real call reports any failure
            }
        }, name);
        t.setDaemon(true);
        thread = t;
        t.start();
    }
}
