package io.engramhost.client;

import io.engramhost.util.Lap;
import io.engramhost.vmm.VmmImport;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * Creates the GPU's context and readies the attach path in a background thread while the client
 * connects and receives the manifest, so a restart pays the context (about 150 ms) in parallel with
 * the handshake instead of after it.
 */
final class GpuPreparation {
    private final CompletableFuture<Long> done;

    private GpuPreparation(CompletableFuture<Long> done) {
        this.done = done;
    }

    static GpuPreparation start(int device) {
        return new GpuPreparation(CompletableFuture.supplyAsync(() -> {
            Lap lap = Lap.start();
            VmmImport.prepare(device);
            return lap.lap();
        }, r -> {
            Thread t = new Thread(r, "engram-gpu-prepare");
            t.setDaemon(true);
            t.start();
        }));
    }

    /**
     * Waits for the preparation and returns the nanoseconds it took; its failure (no driver, no such
     * GPU) is rethrown as it happened.
     */
    long await() {
        try {
            return done.join();
        } catch (CompletionException e) {
            if (e.getCause() instanceof RuntimeException r) {
                throw r;
            }
            throw e;
        }
    }

    void awaitQuietly() {
        try {
            done.join();
        } catch (RuntimeException ignored) {
            // the caller is failing already
        }
    }
}
