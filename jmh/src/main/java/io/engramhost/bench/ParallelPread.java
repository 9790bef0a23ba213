package io.engramhost.bench;

import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * The cold-load baseline's reader: {@code pread} of tensors, back to back, into native memory, in
 * 16 MiB chunks handed to a fixed pool of threads (started once, so thread starts are not timed).
 */
final class ParallelPread implements AutoCloseable {
    static final long CHUNK = 16L << 20;

    private final ExecutorService pool;

    ParallelPread(int threads) {
        pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "bench-pread");
            t.setDaemon(true);
            return t;
        });
    }

    /** Reads {@code tensors} one after another into {@code address}; returns the bytes read. */
    long read(List<TensorInfo> tensors, long address) {
        Map<Path, Fd> files = new HashMap<>();
        try {
            List<Future<?>> chunks = new ArrayList<>();
            long at = address;
            for (TensorInfo t : tensors) {
                Fd fd = files.computeIfAbsent(t.file(), p -> Posix.open(p, Posix.O_RDONLY, 0));
                for (long off = 0; off < t.length(); off += CHUNK) {
                    long dst = at + off;
                    long fileOffset = t.offset() + off;
                    long length = Math.min(CHUNK, t.length() - off);
                    chunks.add(pool.submit(() -> Posix.preadFully(fd, dst, length, fileOffset)));
                }
                at += t.length();
            }
            awaitAll(chunks);
            return at - address;
        } finally {
            files.values().forEach(Fd::close);
        }
    }

    /** Waits for every chunk (none may still write when this returns), then throws the first failure. */
    private static void awaitAll(List<Future<?>> chunks) {
        Throwable failure = null;
        boolean interrupted = false;
        for (Future<?> f : chunks) {
            while (true) {
                try {
                    f.get();
                    break;
                } catch (ExecutionException e) {
                    failure = failure == null ? e.getCause() : failure;
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        if (failure != null) {
            throw new IllegalStateException("baseline pread failed: " + failure, failure);
        }
    }

    @Override
    public void close() {
        pool.shutdownNow();
    }
}
