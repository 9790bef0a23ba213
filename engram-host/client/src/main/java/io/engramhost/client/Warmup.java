package io.engramhost.client;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A fresh JVM spends tens of milliseconds on its first SHA-256 (the JDK's security providers), which the manifest's
 * fingerprint check needs, when nothing in the process has used them. A restarting client readies it in a
 * background thread first thing, so that it overlaps the native bindings' load instead of adding to the import
 * (docs/benchmarks.md: the manifest 34 -> 6 ms). Idempotent; costs nothing once warm. The thread is a daemon
 * thread: an exit that cuts it short loses nothing.
 */
final class Warmup {
    private static final AtomicBoolean STARTED = new AtomicBoolean();

    private Warmup() {
    }

    static void start() {
        if (STARTED.compareAndSet(false, true)) {
            Thread t = new Thread(() -> {
                try {
                    MessageDigest.getInstance("SHA-256").digest(new byte[0]);
                } catch (NoSuchAlgorithmException | RuntimeException | LinkageError ignored) {
                    // a warm-up only saves time: the manifest's check reports any failure
                }
            }, "engram-warmup-sha256");
            t.setDaemon(true);
            t.start();
        }
    }
}
