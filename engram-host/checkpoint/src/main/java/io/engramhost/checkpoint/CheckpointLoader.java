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
 * one big table uses them all. Each file is opened once and closed at the end, on failure too; when load
 * returns or throws, no thread is still writing to the destination.
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

    public CheckpointLoader(int threads, long chunkSize, ProgressListener listener) {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        if (chunkSize < 1) {
            throw new IllegalArgumentException("chunk size must be positive, was " + chunkSize);
        }
        this.threads = threads;
        this.chunkSize = chunkSize;
        this.listener = listener == null ? (done, total) -> { } : listener;
    }

    public CheckpointLoader(int threads) {
        this(threads, DEFAULT_CHUNK, null);
    }

    /**
     * Loads each of {@code tensors} into {@code destination.applyAsLong(tensor)}, an address of at least
     * {@code tensor.length()} writable bytes. Empty tensors are neither read nor asked a destination. Throws
     * {@link CheckpointException} naming the file and tensor of the first failure.
     */
    public Result load(List<TensorInfo> tensors, ToLongFunction<TensorInfo> destination) {
        long start = System.nanoTime();
        Map<Path, Fd> files = new LinkedHashMap<>();
        try {
            List<Chunk> chunks = new ArrayList<>();
            long total = 0;
            for (TensorInfo t : tensors) {
                if (t.length() == 0) {
                    continue;
                }
                long address = destination.applyAsLong(t);
                if (address == 0) {
                    throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': destination address is 0");
                }
                Fd fd = open(files, t);
                for (long off = 0; off < t.length(); off += chunkSize) {
                    chunks.add(new Chunk(t, fd, t.offset() + off, address + off, Math.min(chunkSize, t.length() - off)));
                }
                total += t.length();
            }
            int used = Math.min(threads, chunks.size());
            read(chunks, used, total);
            return new Result(total, (System.nanoTime() - start) / 1e9, tensors.size(), files.size(), chunks.size(),
                    used);
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

    private static Fd open(Map<Path, Fd> files, TensorInfo t) {
        Fd fd = files.get(t.file());
        if (fd == null) {
            try {
                fd = Posix.open(t.file(), Posix.O_RDONLY, 0);
            } catch (RuntimeException e) {
                throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': " + e.getMessage(), e);
            }
            files.put(t.file(), fd);
        }
        long size = Posix.size(fd);
        if (t.offset() + t.length() > size) {
            throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': ends at byte "
                    + (t.offset() + t.length()) + " but the file now has " + size + " (changed since it was validated?)");
        }
        return fd;
    }

    private void read(List<Chunk> chunks, int n, long total) {
        AtomicInteger next = new AtomicInteger();
        AtomicLong done = new AtomicLong();
        AtomicReference<RuntimeException> failure = new AtomicReference<>();
        Runnable worker = () -> {
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
            }
        };
        List<Thread> workers = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            Thread t = new Thread(worker, "engram-load-" + i);
            t.setDaemon(true);
            workers.add(t);
            t.start();
        }
        boolean interrupted = false;
        for (Thread t : workers) {
            while (true) {
                try {
                    t.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true; // stop handing out chunks, but wait: a read in flight still writes memory
                    failure.compareAndSet(null, new CheckpointException("load interrupted"));
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        if (failure.get() != null) {
            throw failure.get();
        }
    }
}
