package io.engramhost.checkpoint;

import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.ToLongFunction;

/**
 * Reads tensors from their files straight into native memory the caller owns: positioned reads
 * ({@code pread}) into the destination, no intermediate copy, split into chunks spread over N threads so
 * one big table uses them all. Read from an {@link OpenCheckpoint}, every byte comes through the fd the
 * file was validated from (what the daemon does); given bare tensors, each file is opened once here and
 * closed at the end, on failure too. When load returns or throws, no thread is still writing to the
 * destination.
 */
public final class CheckpointLoader {
    public static final long DEFAULT_CHUNK = 16L << 20;

    /** Told of progress from the reading threads, possibly concurrently; must be thread-safe and quick. */
    @FunctionalInterface
    public interface ProgressListener {
        void progress(long bytesDone, long bytesTotal);
    }

    /** What a load did: bytes read, wall-clock seconds, tensors, files opened, chunks, threads used. */
    public record Result(long bytes, double seconds, int tensors, int files, int chunks, int threads) {
        public double gibPerSecond() {
            return seconds > 0 ? bytes / (double) (1L << 30) / seconds : 0;
        }
    }

    private record Chunk(TensorInfo tensor, Fd fd, long fileOffset, long address, long length) {
    }

    private final int threads;
    private final long chunkSize;
    private final ProgressListener listener;
    private final Runnable afterChunk;
    private final Runnable threadStart;

    public CheckpointLoader(int threads, long chunkSize, ProgressListener listener) {
        this(threads, chunkSize, listener, null, null);
    }

    private CheckpointLoader(int threads, long chunkSize, ProgressListener listener, Runnable afterChunk,
            Runnable threadStart) {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        if (chunkSize < 1) {
            throw new IllegalArgumentException("chunk size must be positive, was " + chunkSize);
        }
        this.threads = threads;
        this.chunkSize = chunkSize;
        this.listener = listener == null ? (done, total) -> { } : listener;
        this.afterChunk = afterChunk;
        this.threadStart = threadStart;
    }

    public CheckpointLoader(int threads) {
        this(threads, DEFAULT_CHUNK, null);
    }

    /**
     * Test only: a loader that runs {@code hook} on the reading thread after each chunk it has read (the
     * daemon's tests use it to hold a load at a known point while they change the checkpoint). The hook
     * may block; a failure in it fails the load.
     */
    public CheckpointLoader withAfterChunkHook(Runnable hook) {
        return new CheckpointLoader(threads, chunkSize, listener, hook, threadStart);
    }

    /** The same loader whose threads each run {@code setup} first (the daemon pins them to a node's CPUs). */
    public CheckpointLoader withThreadStart(Runnable setup) {
        return new CheckpointLoader(threads, chunkSize, listener, afterChunk, setup);
    }

    /**
     * Loads each of {@code tensors} into {@code destination.applyAsLong(tensor)}, an address of at least
     * {@code tensor.length()} writable bytes. Empty tensors are neither read nor asked a destination. Throws
     * {@link CheckpointException} naming the file and tensor of the first failure. Each file is opened here,
     * by its path; {@link #load(OpenCheckpoint, List, ToLongFunction)} reads through the fds that were
     * validated instead.
     */
    public Result load(List<TensorInfo> tensors, ToLongFunction<TensorInfo> destination) {
        Map<Path, Fd> files = new LinkedHashMap<>();
        try {
            return load(tensors, destination, t -> {
                Fd fd = files.get(t.file());
                if (fd == null) {
                    try {
                        fd = Posix.open(t.file(), Posix.O_RDONLY, 0);
                    } catch (RuntimeException e) {
                        throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': " + e.getMessage(), e);
                    }
                    files.put(t.file(), fd);
                }
                return fd;
            });
        } finally {
            RuntimeException closing = null;
            for (Fd fd : files.values()) {
                try {
                    fd.close();
                } catch (RuntimeException e) {
                    closing = closing == null ? e : closing;
                }
            }
            if (closing != null) {
                throw closing;
            }
        }
    }

    /**
     * Loads {@code tensors} of {@code source} through the fds it was validated from (nothing is opened
     * again by path, and nothing is closed: the caller closes {@code source}, and calls
     * {@link OpenCheckpoint#checkUnchanged} once everything is read).
     */
    public Result load(OpenCheckpoint source, List<TensorInfo> tensors, ToLongFunction<TensorInfo> destination) {
        return load(tensors, destination, source::fd);
    }

    private Result load(List<TensorInfo> tensors, ToLongFunction<TensorInfo> destination,
            java.util.function.Function<TensorInfo, Fd> fdOf) {
        long start = System.nanoTime();
        List<Chunk> chunks = new ArrayList<>();
        java.util.Set<Fd> used = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        long total = 0;
        for (TensorInfo t : tensors) {
            if (t.length() == 0) {
                continue;
            }
            long address = destination.applyAsLong(t);
            if (address == 0) {
                throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': destination address is 0");
            }
            Fd fd = fdOf.apply(t);
            used.add(fd);
            checkSize(fd, t);
            for (long off = 0; off < t.length(); off += chunkSize) {
                chunks.add(new Chunk(t, fd, t.offset() + off, address + off, Math.min(chunkSize, t.length() - off)));
            }
            total += t.length();
        }
        int n = Math.min(threads, chunks.size());
        read(chunks, n, total);
        return new Result(total, (System.nanoTime() - start) / 1e9, tensors.size(), used.size(), chunks.size(), n);
    }

    private static void checkSize(Fd fd, TensorInfo t) {
        long size = Posix.size(fd);
        if (t.offset() + t.length() > size) {
            throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': ends at byte "
                    + (t.offset() + t.length()) + " but the file now has " + size + " (changed since it was validated?)");
        }
    }

    private void read(List<Chunk> chunks, int n, long total) {
        AtomicInteger next = new AtomicInteger();
        AtomicLong done = new AtomicLong();
        AtomicReference<RuntimeException> failure = new AtomicReference<>();
        Runnable worker = () -> {
            if (threadStart != null) {
                try {
                    threadStart.run();
                } catch (RuntimeException e) {
                    failure.compareAndSet(null, new CheckpointException("a load thread's setup failed: "
                            + e.getMessage(), e));
                    return;
                }
            }
            while (failure.get() == null) {
                int i = next.getAndIncrement();
                if (i >= chunks.size()) {
                    return;
                }
                Chunk c = chunks.get(i);
                try {
                    Posix.preadFully(c.fd, c.address, c.length, c.fileOffset);
                } catch (Throwable e) {
                    failure.compareAndSet(null, new CheckpointException(c.tensor.file() + ": tensor '" + c.tensor.name()
                            + "': reading " + c.length + " bytes at file offset " + c.fileOffset + ": " + e.getMessage(), e));
                    return;
                }
                try {
                    listener.progress(done.addAndGet(c.length), total);
                } catch (Throwable e) {
                    failure.compareAndSet(null, new CheckpointException("progress listener failed: " + e, e));
                }
                if (afterChunk != null) {
                    try {
                        afterChunk.run();
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e instanceof CheckpointException ce ? ce
                                : new CheckpointException("after-chunk hook failed: " + e, e));
                    }
                }
            }
        };
        // stop handing out chunks, but wait: a read in flight still writes memory
        WorkerThreads.runAll(n, "engram-load-", worker,
                () -> failure.compareAndSet(null, new CheckpointException("load interrupted")));
        if (failure.get() != null) {
            throw failure.get();
        }
    }
}
