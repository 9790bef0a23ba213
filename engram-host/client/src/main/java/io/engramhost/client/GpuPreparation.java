package io.engramhost.client;

import io.engramhost.cuda.Cuda;
import io.engramhost.util.Lap;
import io.engramhost.vmm.VmmImport;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Creates the GPU's context and readies the attach path in a background thread while the client
 * connects and receives the manifest, so a restart pays the context (about 150 ms) in parallel with
 * the handshake instead of after it. {@link EngramClient#prepare} starts one before the import does
 * ({@link #startEarly}); the next import with a GPU view on that device takes it ({@link #take}).
 */
final class GpuPreparation {
    /** Started by {@link #startEarly} and not yet taken by an import, per device. */
    private static final Map<Integer, GpuPreparation> PENDING = new ConcurrentHashMap<>();
    /** The driver's load started by {@link #loadDriverEarly}, or null. */
    private static volatile CompletableFuture<Void> driverLoad;

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
     * Starts loading the CUDA driver in a background thread, once: {@link Cuda#available()}'s probe (libcuda's
     * binding, cuInit, the device count), the part of a preparation that no option decides. Whatever it finds is
     * what every later CUDA call reports.
     */
    static synchronized void loadDriverEarly() {
        if (driverLoad == null) {
            driverLoad = CompletableFuture.runAsync(Cuda::available, r -> {
                Thread t = new Thread(r, "engram-cuda-load");
                t.setDaemon(true);
                t.start();
            });
        }
    }

    /** Starts a preparation of {@code device} for the next import, unless one is waiting for it already. */
    static void startEarly(int device) {
        PENDING.computeIfAbsent(device, GpuPreparation::start);
    }

    /**
     * The preparation {@link #startEarly} started for {@code device}, which the calling import takes (the import
     * after it starts its own); else a new one.
     */
    static GpuPreparation take(int device) {
        GpuPreparation early = PENDING.remove(device);
        return early != null ? early : start(device);
    }

    /**
     * Waits up to {@code millis} for the driver's load and the preparations no import took (a process exiting
     * before its import, on an error of its own), so that the exit does not cut a driver call short.
     */
    static void awaitUntaken(long millis) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        List<CompletableFuture<?>> started = new ArrayList<>();
        if (driverLoad != null) {
            started.add(driverLoad);
        }
        PENDING.values().forEach(p -> started.add(p.done));
        for (CompletableFuture<?> f : started) {
            try {
                f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (ExecutionException | TimeoutException | RuntimeException e) {
                // its failure is nobody's now; past the deadline the exit goes ahead
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
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
