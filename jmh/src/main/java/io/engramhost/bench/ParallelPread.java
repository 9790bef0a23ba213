package io.engramhost.bench;

import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * The cold-load baseline's reader: {@code pread} of tensors, back to back, into native memory, in
 * 16 MiB chunks handed to a fixed pool of threads (started once, so thread starts are not timed); and,
 * as a diagnostic, the same chunks written into a memfd with pwrite through per-thread bounce buffers.
 */
final class ParallelPread implements AutoCloseable {
    static final long CHUNK = 16L << 20;

    private final ExecutorService pool;
    private final List<Mapping> bounces = new CopyOnWriteArrayList<>();
    private final ThreadLocal<Mapping> bounce = ThreadLocal.withInitial(() -> {
        Mapping m = Posix.mmapAnonymous(CHUNK, "bounce buffer");
        Posix.madvise(m, 0, CHUNK, Posix.MADV_POPULATE_WRITE);
        bounces.add(m);
        return m;
    });

    ParallelPread(int threads) {
        pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "bench-pread");
            t.setDaemon(true);
            return t;
        });
    }

    /** One chunk's work: {@code length} bytes at {@code fileOffset} of {@code file}, {@code at} bytes into the output. */
    private interface ChunkAction {
        void run(Fd file, long fileOffset, long length, long at);
    }

    /** Reads {@code tensors} one after another into {@code address}; returns the bytes read. */
    long read(List<TensorInfo> tensors, long address) {
        return run(tensors, (file, fileOffset, length, at) -> Posix.preadFully(file, address + at, length, fileOffset));
    }

    /**
     * Writes {@code tensors} one after another into {@code target} with pwrite, each chunk read first into a
     * per-thread bounce buffer: two copies, but no page faults on a mapping of the target.
     */
    long copyThroughBounce(List<TensorInfo> tensors, Fd target) {
        return run(tensors, (file, fileOffset, length, at) -> {
            long buffer = bounce.get().address();
            Posix.preadFully(file, buffer, length, fileOffset);
            Posix.pwriteFully(target, buffer, length, at);
        });
    }

    private long run(List<TensorInfo> tensors, ChunkAction action) {
        Map<Path, Fd> files = new HashMap<>();
        try {
            List<Future<?>> chunks = new ArrayList<>();
            long at = 0;
            for (TensorInfo t : tensors) {
                Fd fd = files.computeIfAbsent(t.file(), p -> Posix.open(p, Posix.O_RDONLY, 0));
                for (long off = 0; off < t.length(); off += CHUNK) {
                    long out = at + off;
                    long fileOffset = t.offset() + off;
                    long length = Math.min(CHUNK, t.length() - off);
                    chunks.add(pool.submit(() -> action.run(fd, fileOffset, length, out)));
                }
                at += t.length();
            }
            awaitAll(chunks);
            return at;
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

    /** Stops the threads, then frees their bounce buffers. */
    @Override
    public void close() {
        pool.shutdownNow();
        try {
            pool.awaitTermination(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        bounces.forEach(Mapping::close);
    }
}
