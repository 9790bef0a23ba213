package io.engramhost.bench;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.PageCache;
import io.engramhost.os.Posix;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * A checkpoint (one V4.1 Engram layer: weight F8_E4M3 [rows, 256] and scale F8_E8M0 [rows, 8], about
 * {@code checkpointMiB} in all, generated once per trial and read once so it sits in the page cache)
 * made resident with {@code threads} threads. With {@code cache=cold} its pages are dropped from the page
 * cache before every op (posix_fadvise DONTNEED, outside the timing; checked with mincore), so the op reads
 * the disk; the checkpoint goes to {@code $ENGRAM_BENCH_DIR} when set, else java.io.tmpdir, which must not
 * be tmpfs for a cold cache. Ours: memfds created, filled by CheckpointLoader, sealed.
 * Baseline: pread of the same bytes, same 16 MiB chunks over the same number of threads, into anonymous
 * memory. Freeing the destination happens after each op, outside the timing.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 4)
@Measurement(iterations = 12)
@Fork(2)
public class ColdLoadBench {
    @Param({"1", "2", "4"})
    public int threads;

    @Param({"256"})
    public int checkpointMiB;

    /** warm: the checkpoint is in the page cache; cold: its pages are dropped before every op. */
    @Param({"warm", "cold"})
    public String cache;

    static final String DIR_ENV = "ENGRAM_BENCH_DIR";

    private Path dir;
    private Path file;
    private List<TensorInfo> tensors;
    private long totalBytes;
    private ParallelPread pread;
    private final List<AutoCloseable> loaded = new ArrayList<>();

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        if (!cache.equals("warm") && !cache.equals("cold")) {
            throw new IllegalArgumentException("cache: '" + cache + "' is not one of warm, cold");
        }
        long rows = ((long) checkpointMiB << 20) / (256 + 8);
        String parent = System.getenv(DIR_ENV);
        if (parent != null && !parent.isBlank() && !Files.isDirectory(Path.of(parent))) {
            throw new IllegalArgumentException(DIR_ENV + "=" + parent + " is not a directory (it holds the checkpoint"
                    + " ColdLoadBench reads)");
        }
        dir = parent == null || parent.isBlank() ? Files.createTempDirectory("engram-bench-ckpt-")
                : Files.createTempDirectory(Path.of(parent), "engram-bench-ckpt-");
        file = CheckpointGenerator.writeSingle(dir, new CheckpointGenerator.Spec(List.of(1), rows, 256, 7L));
        tensors = Checkpoint.open(file).tensors();
        totalBytes = Checkpoint.totalBytes(tensors);
        pread = new ParallelPread(threads);
        try (Mapping scratch = Posix.mmapAnonymous(totalBytes, "page-cache warm-up")) {
            pread.read(tensors, scratch.address());
        }
        if (cache.equals("cold")) {
            dropCache();
        }
    }

    /** cache=cold: the checkpoint's pages out of the page cache before each op (not timed). */
    @Setup(Level.Invocation)
    public void dropCache() throws IOException {
        if (!cache.equals("cold")) {
            return;
        }
        try (Fd fd = Posix.open(file, Posix.O_RDONLY, 0)) {
            long size = Posix.size(fd);
            PageCache.drop(fd);
            long left = PageCache.residentPages(fd, size);
            if (left != 0) {
                throw new IllegalStateException("cache=cold: " + left + " of " + (size + Posix.pageSize() - 1) / Posix.pageSize() + " pages of "
                        + file + " stay in the page cache after posix_fadvise(DONTNEED) (its file system is "
                        + Files.getFileStore(dir).type() + "); set " + DIR_ENV + " to a directory on a disk");
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        freeLoaded();
        pread.close();
        try (var s = Files.list(dir)) {
            for (Path p : s.toList()) {
                Files.delete(p);
            }
        }
        Files.delete(dir);
    }

    @TearDown(Level.Invocation)
    public void freeLoaded() {
        for (int i = loaded.size() - 1; i >= 0; i--) {
            try {
                loaded.get(i).close();
            } catch (Exception e) {
                throw new IllegalStateException("freeing a loaded table: " + e.getMessage(), e);
            }
        }
        loaded.clear();
    }

    /** Ours: one memfd per tensor, CheckpointLoader into the writable mappings, then sealed (as the daemon does). */
    @Benchmark
    public long loaderIntoMemfd() {
        Map<TensorInfo, MemfdRegion> regions = new IdentityHashMap<>();
        for (TensorInfo t : tensors) {
            regions.put(t, newRegion(t));
        }
        CheckpointLoader.Result result = new CheckpointLoader(threads)
                .load(tensors, t -> regions.get(t).writable().address());
        regions.values().forEach(MemfdRegion::seal);
        return result.bytes();
    }

    /**
     * Diagnostic: as {@link #loaderIntoMemfd}, with every page of the memfds allocated up front
     * (MADV_POPULATE_WRITE) so the reads take no page faults: does prefaulting pay for itself?
     */
    @Benchmark
    public long loaderIntoPopulatedMemfd() {
        Map<TensorInfo, MemfdRegion> regions = new IdentityHashMap<>();
        for (TensorInfo t : tensors) {
            MemfdRegion r = newRegion(t);
            Posix.madvise(r.writable(), 0, r.size(), Posix.MADV_POPULATE_WRITE);
            regions.put(t, r);
        }
        CheckpointLoader.Result result = new CheckpointLoader(threads)
                .load(tensors, t -> regions.get(t).writable().address());
        regions.values().forEach(MemfdRegion::seal);
        return result.bytes();
    }

    /** Diagnostic: the baseline's reader into the same sealed memfds (separates memfd pages and sealing from the loader). */
    @Benchmark
    public long preadIntoMemfd() {
        long done = 0;
        for (TensorInfo t : tensors) {
            MemfdRegion r = newRegion(t);
            done += pread.read(List.of(t), r.writable().address());
            r.seal();
        }
        return done;
    }

    private MemfdRegion newRegion(TensorInfo t) {
        MemfdRegion r = MemfdRegion.create("engram.bench." + t.name(), PageKind.SMALL.roundUp(t.length()),
                PageKind.SMALL, null);
        loaded.add(r);
        return r;
    }

    /**
     * Diagnostic: the memfds filled with pwrite (pread into a per-thread bounce buffer first) instead of
     * through their mapping: the kernel allocates the pages as it writes, with no page faults and no page
     * table to tear down when sealing.
     */
    @Benchmark
    public long pwriteIntoMemfd() {
        long done = 0;
        for (TensorInfo t : tensors) {
            MemfdRegion r = newRegion(t);
            done += pread.copyThroughBounce(List.of(t), r.fd());
            r.seal();
        }
        return done;
    }

    /**
     * Diagnostic, single-threaded (the threads parameter does not apply): only the page allocation of
     * the memfd destination, every page allocated (MADV_POPULATE_WRITE) then sealed, no reading.
     */
    @Benchmark
    public long memfdAllocateSeal() {
        long bytes = 0;
        for (TensorInfo t : tensors) {
            MemfdRegion r = newRegion(t);
            Posix.madvise(r.writable(), 0, r.size(), Posix.MADV_POPULATE_WRITE);
            r.seal();
            bytes += r.size();
        }
        return bytes;
    }

    /** Diagnostic, single-threaded: the same page allocation for the anonymous destination. */
    @Benchmark
    public long anonymousAllocate() {
        Mapping m = Posix.mmapAnonymous(totalBytes, "cold-load baseline");
        loaded.add(m);
        Posix.madvise(m, 0, totalBytes, Posix.MADV_POPULATE_WRITE);
        return totalBytes;
    }

    /** Baseline: pread of the same bytes into one anonymous mapping. */
    @Benchmark
    public long preadIntoAnonymous() {
        Mapping m = Posix.mmapAnonymous(totalBytes, "cold-load baseline");
        loaded.add(m);
        return pread.read(tensors, m.address());
    }
}
