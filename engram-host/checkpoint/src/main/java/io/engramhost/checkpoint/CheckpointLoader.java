package io.engramhost.checkpoint;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import java.util.function.ToLongFunction;

/**
 * Reads tensors from their files straight into native memory the caller owns, on N threads, and takes each
 * tensor's engram digest v1 ({@link ContentDigest}) as it goes. The unit of work is one digest chunk (64 MiB of a
 * tensor, from its start), read in pieces of {@code pieceSize} bytes; the thread that reads a piece hashes it
 * next, while it is still in the CPU's cache, so the digest costs no second pass over memory.
 *
 * <p>A unit whose pages are mostly in the page cache is read with {@code pread} through the cache; one that is
 * mostly not is read with {@code O_DIRECT} into the thread's aligned bounce buffer and copied (a cold disk's
 * sequential rate without the cache's readahead and copy-in; {@link ReadMode}). Such a unit is split into
 * {@link #DIRECT_PIECE} pieces handed out in file order, so the threads' requests together make one sequential
 * stream the disk (or the block device behind a virtual one) sees as such; the thread that reads a unit's last
 * piece hashes the unit from memory (a cold disk is far slower than that second pass). The O_DIRECT fd is a second open
 * of the same file through {@code /proc/self/fd}, checked to be the same inode, so every byte still comes from the
 * file that was validated ({@link LoadFile}). A filesystem that refuses O_DIRECT (tmpfs) is read through the cache.
 *
 * <p>Work can be added while the threads run ({@link #start}, {@link Session#add}): the daemon adds each region's
 * tensors as soon as the region exists, so reading overlaps the creation of the next. Read from an
 * {@link OpenCheckpoint}, every byte comes through the fd the file was validated from; given bare tensors, each file
 * is opened once here and closed at the end, on failure too. When a load returns or throws, no thread is still
 * writing to the destination.
 */
public final class CheckpointLoader {
    /** Pieces each unit is read (and hashed) in: small enough to stay in the CPU's cache, a 2 MiB huge page. */
    public static final long DEFAULT_PIECE = 2L << 20;
    /** O_DIRECT reads go in pieces of this (a disk wants large requests); the bounce buffer is this big. */
    static final long DIRECT_PIECE = 16L << 20;
    /** O_DIRECT alignment of offsets, lengths and buffers: the largest logical block size in use. */
    static final long DIRECT_ALIGN = 4096;

    /** How units are read. */
    public enum ReadMode {
        /** O_DIRECT for units mostly not in the page cache, {@code pread} through the cache for the rest. */
        AUTO,
        /** Always through the page cache. */
        BUFFERED,
        /** Always O_DIRECT (where the filesystem allows it). */
        DIRECT
    }

    /**
     * Told of progress on each reading thread after every piece it has read, possibly concurrently: it must be
     * thread-safe. It may block, holding that thread (the daemon's hooks hold a load there); an exception it throws
     * fails the load, a {@link CheckpointException} as it is.
     */
    @FunctionalInterface
    public interface ProgressListener {
        void progress(long bytesDone, long bytesTotal);
    }

    /**
     * What a load did: bytes read, wall-clock seconds from start to finish, tensors, files read, units (digest
     * chunks), threads, the bytes read with O_DIRECT, the seconds from the first read to the last (creation of
     * the destinations excluded where it came first), every tensor's engram digest v1, and why O_DIRECT was not
     * used where it was wanted (null if it was not refused).
     */
    public record Result(long bytes, double seconds, int tensors, int files, int chunks, int threads, long directBytes,
            double readSeconds, Map<TensorInfo, Long> digests, String directRefused) {
        public double gibPerSecond() {
            return seconds > 0 ? bytes / (double) (1L << 30) / seconds : 0;
        }

        /** The read's own rate: bytes over the time from the first read to the last. */
        public double readGibPerSecond() {
            return readSeconds > 0 ? bytes / (double) (1L << 30) / readSeconds : 0;
        }

        public long digest(TensorInfo t) {
            Long d = digests.get(t);
            if (d == null) {
                throw new IllegalArgumentException("tensor '" + t.name() + "' was not loaded");
            }
            return d;
        }
    }

    private final int threads;
    private final long pieceSize;
    private final ProgressListener listener;
    private final Runnable threadStart;
    private final ReadMode mode;

    public CheckpointLoader(int threads, long pieceSize, ProgressListener listener) {
        this(threads, pieceSize, listener, null, ReadMode.AUTO);
    }

    private CheckpointLoader(int threads, long pieceSize, ProgressListener listener, Runnable threadStart,
            ReadMode mode) {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        if (pieceSize < 1) {
            throw new IllegalArgumentException("chunk size must be positive, was " + pieceSize);
        }
        this.threads = threads;
        this.pieceSize = pieceSize;
        this.listener = listener == null ? (done, total) -> { } : listener;
        this.threadStart = threadStart;
        this.mode = mode;
    }

    public CheckpointLoader(int threads) {
        this(threads, DEFAULT_PIECE, null);
    }

    /** The same loader whose threads each run {@code setup} first (the daemon pins them to a node's CPUs). */
    public CheckpointLoader withThreadStart(Runnable setup) {
        return new CheckpointLoader(threads, pieceSize, listener, setup, mode);
    }

    /** The same loader reading in {@code readMode}. */
    public CheckpointLoader withReadMode(ReadMode readMode) {
        return new CheckpointLoader(threads, pieceSize, listener, threadStart, readMode);
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
            return loadAll(tensors, destination, t -> {
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
        return loadAll(tensors, destination, source::fd);
    }

    private Result loadAll(List<TensorInfo> tensors, ToLongFunction<TensorInfo> destination, Function<TensorInfo, Fd> fdOf) {
        long total = tensors.stream().mapToLong(TensorInfo::length).sum();
        long units = tensors.stream().mapToLong(t -> (t.length() + ContentDigest.CHUNK - 1) / ContentDigest.CHUNK).sum();
        try (Session s = new Session(fdOf, total, (int) Math.max(1, Math.min(threads, units)))) {
            s.add(tensors, destination);
            return s.finish();
        }
    }

    /**
     * Starts the reading threads for {@code totalBytes} of tensors of {@code source}, to be given with
     * {@link Session#add}; {@link Session#finish} waits for them. The caller closes the session (which, if it was
     * not finished, stops the threads and waits for them).
     */
    public Session start(OpenCheckpoint source, long totalBytes) {
        return new Session(source::fd, totalBytes, threads);
    }

    /**
     * One tensor's part in a load: its file (the threads reach it here, never through the session's map, which
     * only the adding thread touches), its destination and the XXH64 of each of its digest chunks.
     */
    private record Target(TensorInfo tensor, LoadFile file, long address, long[] chunkHashes, boolean[] added) {
        Target(TensorInfo tensor, LoadFile file, long address, long[] chunkHashes) {
            this(tensor, file, address, chunkHashes, new boolean[chunkHashes.length]);
        }
    }

    /**
     * A digest chunk of a tensor: where it is in the file and in memory; {@code pending} counts the bytes of an
     * O_DIRECT unit's pieces not yet read (null: the unit is read through the cache as one task).
     */
    private record Unit(Target target, int index, long fileOffset, long address, long length, AtomicLong pending) {
    }

    /** What a thread takes: a whole unit through the cache, or one O_DIRECT piece {@code [offset, +length)} of it. */
    private record Task(Unit unit, long offset, long length) {
    }

    private static final Task END = new Task(null, 0, 0);

    /** A load in progress: reading threads fed by {@link #add}, ended by {@link #finish} or {@link #close}. */
    public final class Session implements AutoCloseable {
        private final Function<TensorInfo, Fd> fdOf;
        private final long total;
        private final long start = System.nanoTime();
        private final LinkedBlockingQueue<Task> queue = new LinkedBlockingQueue<>();
        private final List<Target> targets = new ArrayList<>();
        /** The targets of non-empty tensors, by tensor: the parts of one share it. */
        private final Map<TensorInfo, Target> parts = new IdentityHashMap<>();
        private final Map<Fd, LoadFile> files = new IdentityHashMap<>();
        private final AtomicReference<RuntimeException> failure = new AtomicReference<>();
        private final AtomicLong done = new AtomicLong();
        private final AtomicLong direct = new AtomicLong();
        private final AtomicLong firstRead = new AtomicLong(Long.MAX_VALUE);
        private final AtomicLong lastRead = new AtomicLong();
        private final List<Thread> workers = new ArrayList<>();
        private int units;
        private boolean ended;

        private Session(Function<TensorInfo, Fd> fdOf, long total, int threadCount) {
            this.fdOf = fdOf;
            this.total = total;
            for (int i = 0; i < threadCount; i++) {
                Thread t = new Thread(this::work, "engram-load-" + i);
                t.setDaemon(true);
                workers.add(t);
                t.start();
            }
        }

        /**
         * Adds {@code tensors}, each read into {@code destination.applyAsLong(tensor)} (at least its length of
         * writable bytes); empty tensors are neither read nor asked a destination. Throws at once on a destination
         * of 0 or a file now shorter than the tensor, and after a failure of the threads.
         */
        public void add(List<TensorInfo> tensors, ToLongFunction<TensorInfo> destination) {
            throwIfFailed();
            List<Task> batch = new ArrayList<>();
            for (TensorInfo t : tensors) {
                if (t.length() == 0) {
                    targets.add(new Target(t, null, 0, new long[0]));
                    continue;
                }
                addUnits(t, destination.applyAsLong(t), 0, t.length(), batch);
            }
            queue.addAll(batch);
        }

        /**
         * Adds the bytes {@code [from, to)} of {@code t}, read into {@code address + from} ({@code address} is where
         * the whole tensor goes): a tensor whose memory comes to exist piece by piece is read as each piece does.
         * {@code from} and {@code to} are multiples of {@link ContentDigest#CHUNK} ({@code to} may be the tensor's
         * length); each part of a tensor is added once, at the same {@code address}, and all of it before
         * {@link #finish}.
         */
        public void addPart(TensorInfo t, long address, long from, long to) {
            throwIfFailed();
            if (from < 0 || from >= to || to > t.length() || from % ContentDigest.CHUNK != 0
                    || to % ContentDigest.CHUNK != 0 && to != t.length()) {
                throw new IllegalArgumentException("tensor '" + t.name() + "': part [" + from + ", " + to + ") is not"
                        + " whole digest chunks of its " + t.length() + " bytes");
            }
            List<Task> batch = new ArrayList<>();
            addUnits(t, address, from, to, batch);
            queue.addAll(batch);
        }

        private void addUnits(TensorInfo t, long address, long from, long to, List<Task> batch) {
            if (address == 0) {
                throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': destination address is 0");
            }
            Target target = parts.get(t);
            if (target == null) {
                Fd fd = fdOf.apply(t);
                LoadFile file = files.computeIfAbsent(fd, LoadFile::new);
                LoadFile.checkSize(fd, t);
                file.prepare(mode);
                int n = Math.toIntExact((t.length() + ContentDigest.CHUNK - 1) / ContentDigest.CHUNK);
                target = new Target(t, file, address, new long[n], new boolean[n]);
                targets.add(target);
                parts.put(t, target);
            } else if (target.address != address) {
                throw new IllegalArgumentException("tensor '" + t.name() + "': a part at another address");
            }
            LoadFile file = target.file;
            int first = Math.toIntExact(from / ContentDigest.CHUNK);
            int last = Math.toIntExact((to + ContentDigest.CHUNK - 1) / ContentDigest.CHUNK);
            for (int i = first; i < last; i++) {
                if (target.added[i]) {
                    throw new IllegalArgumentException("tensor '" + t.name() + "': chunk " + i + " added twice");
                }
                target.added[i] = true;
                long off = i * ContentDigest.CHUNK;
                long len = Math.min(ContentDigest.CHUNK, t.length() - off);
                long fileOffset = t.offset() + off;
                if (!file.readsDirect(mode, fileOffset, len)) {
                    batch.add(new Task(new Unit(target, i, fileOffset, address + off, len, null), 0, len));
                    continue;
                }
                Unit u = new Unit(target, i, fileOffset, address + off, len, new AtomicLong(len));
                // pieces end on file offsets that are multiples of DIRECT_PIECE: the requests do not overlap
                // (only a unit's edges share a block) and most are exactly one aligned DIRECT_PIECE
                for (long p = 0; p < len; ) {
                    long end = Math.min(len, (fileOffset + p) / DIRECT_PIECE * DIRECT_PIECE + DIRECT_PIECE - fileOffset);
                    batch.add(new Task(u, p, end - p));
                    p = end;
                }
            }
            units += last - first;
        }

        /** Waits for every unit added to be read and hashed; throws the first failure. */
        public Result finish() {
            end();
            throwIfFailed();
            Map<TensorInfo, Long> digests = new LinkedHashMap<>();
            long bytes = 0;
            for (Target t : targets) {
                for (int i = 0; i < t.added.length; i++) {
                    if (!t.added[i]) {
                        throw new IllegalStateException("tensor '" + t.tensor.name() + "': chunk " + i + " of "
                                + t.added.length + " was never added to the load");
                    }
                }
                ByteBuffer hashes = ByteBuffer.allocate(8 * t.chunkHashes.length).order(ByteOrder.LITTLE_ENDIAN);
                for (long h : t.chunkHashes) {
                    hashes.putLong(h);
                }
                digests.put(t.tensor, Xxh64.hash(hashes.array()));
                bytes += t.tensor.length();
            }
            String refused = null;
            for (LoadFile f : files.values()) {
                refused = refused == null ? f.directRefused : refused;
            }
            long first = firstRead.get();
            double readSeconds = first == Long.MAX_VALUE ? 0 : (lastRead.get() - first) / 1e9;
            return new Result(bytes, (System.nanoTime() - start) / 1e9, targets.size(), files.size(), units,
                    workers.size(), direct.get(), readSeconds, Collections.unmodifiableMap(digests), refused);
        }

        /** Stops the threads (what is in flight finishes: it writes memory), waits for them, closes what was opened. */
        @Override
        public void close() {
            if (!ended) {
                failure.compareAndSet(null, new CheckpointException("load abandoned"));
                queue.clear();
            }
            end();
            RuntimeException closing = null;
            for (LoadFile f : files.values()) {
                try {
                    f.close();
                } catch (RuntimeException e) {
                    closing = closing == null ? e : closing;
                }
            }
            files.clear();
            if (closing != null && failure.get() == null) {
                throw closing;
            }
        }

        private void end() {
            if (ended) {
                return;
            }
            ended = true;
            for (int i = 0; i < workers.size(); i++) {
                queue.add(END);
            }
            // a read in flight still writes memory: on an interrupt, stop handing out work, but wait
            WorkerThreads.joinAll(workers, () -> {
                failure.compareAndSet(null, new CheckpointException("load interrupted"));
                queue.clear();
                for (int i = 0; i < workers.size(); i++) {
                    queue.add(END);
                }
            });
        }

        private void throwIfFailed() {
            RuntimeException e = failure.get();
            if (e != null) {
                throw e;
            }
        }

        private void work() {
            if (threadStart != null) {
                try {
                    threadStart.run();
                } catch (RuntimeException e) {
                    failure.compareAndSet(null, new CheckpointException("a load thread's setup failed: "
                            + e.getMessage(), e));
                    return;
                }
            }
            Mapping bounce = null;
            try {
                while (true) {
                    Task u;
                    try {
                        u = queue.take();
                    } catch (InterruptedException e) {
                        failure.compareAndSet(null, new CheckpointException("load interrupted"));
                        return;
                    }
                    if (u == END || failure.get() != null) {
                        if (u == END) {
                            return;
                        }
                        continue;
                    }
                    try {
                        if (bounce == null && mode != ReadMode.BUFFERED) {
                            bounce = Posix.mmapAnonymous(DIRECT_PIECE + 2 * DIRECT_ALIGN, "O_DIRECT bounce buffer");
                        }
                        if (u.unit.pending == null) {
                            readUnit(u.unit);
                        } else {
                            readDirectPiece(u, bounce);
                        }
                    } catch (CheckpointException e) {
                        failure.compareAndSet(null, e);
                    } catch (RuntimeException | Error e) {
                        failure.compareAndSet(null, new CheckpointException(u.unit.target.tensor.file() + ": tensor '"
                                + u.unit.target.tensor.name() + "': " + e.getMessage(), e));
                    }
                }
            } finally {
                if (bounce != null) {
                    bounce.close();
                }
            }
        }

        /** Reads a unit through the page cache in pieces of {@code pieceSize}, hashing each piece as it is read. */
        private void readUnit(Unit u) {
            LoadFile file = u.target.file;
            firstRead.accumulateAndGet(System.nanoTime(), Math::min);
            Xxh64 hash = new Xxh64(0);
            for (long p = 0; p < u.length; p += pieceSize) {
                if (failure.get() != null) {
                    return;
                }
                long len = Math.min(pieceSize, u.length - p);
                long at = u.address + p;
                try {
                    Posix.preadFully(file.fd, at, len, u.fileOffset + p);
                } catch (RuntimeException e) {
                    throw readFailed(u, len, u.fileOffset + p, false, e);
                }
                hash.updateMemory(at, len);
                pieceDone(len);
            }
            u.target.chunkHashes[u.index] = hash.digest();
            lastRead.accumulateAndGet(System.nanoTime(), Math::max);
        }

        /**
         * Reads one O_DIRECT piece of a unit through {@code bounce}; the thread whose piece completes the unit
         * hashes the unit from memory (the atomic count orders the other threads' writes before that read).
         */
        private void readDirectPiece(Task task, Mapping bounce) {
            Unit u = task.unit;
            LoadFile file = u.target.file;
            firstRead.accumulateAndGet(System.nanoTime(), Math::min);
            long at = u.address + task.offset;
            long fileOffset = u.fileOffset + task.offset;
            try {
                file.readDirect(bounce, at, task.length, fileOffset);
            } catch (RuntimeException e) {
                throw readFailed(u, task.length, fileOffset, true, e);
            }
            direct.addAndGet(task.length);
            pieceDone(task.length);
            if (u.pending.addAndGet(-task.length) == 0) {
                Xxh64 hash = new Xxh64(0);
                hash.updateMemory(u.address, u.length);
                u.target.chunkHashes[u.index] = hash.digest();
                lastRead.accumulateAndGet(System.nanoTime(), Math::max);
            }
        }

        private CheckpointException readFailed(Unit u, long len, long fileOffset, boolean direct, RuntimeException e) {
            return new CheckpointException(u.target.tensor.file() + ": tensor '" + u.target.tensor.name()
                    + "': reading " + len + " bytes at file offset " + fileOffset + (direct ? " (O_DIRECT)" : "")
                    + ": " + e.getMessage(), e);
        }

        /** Counts {@code len} bytes read for the progress listener. */
        private void pieceDone(long len) {
            try {
                listener.progress(done.addAndGet(len), total);
            } catch (CheckpointException e) {
                throw e;
            } catch (RuntimeException e) {
                throw new CheckpointException("progress listener failed: " + e, e);
            }
        }
    }
}
