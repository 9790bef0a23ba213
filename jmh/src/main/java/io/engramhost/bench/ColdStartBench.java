package io.engramhost.bench;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.os.Arch;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.PageCache;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import io.engramhost.store.HostRegion;
import io.engramhost.store.HostRegionFactory;
import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
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
import org.openjdk.jmh.infra.BenchmarkParams;

/**
 * The read phase of the daemon's load (issue 14), per backend, against what the machine itself can do with the same
 * threads, in one run. The checkpoint is {@code $ENGRAM_BENCH_CHECKPOINT} when set (so a 40 GiB one is generated once
 * for every fork), else a V4.1-layout one of {@code checkpointMiB} generated in the trial's setup. With
 * {@code cache=warm} it is read once in the setup, so every op reads the page cache; with {@code cache=cold} its pages
 * are dropped before every op (posix_fadvise DONTNEED, checked with mincore; not timed), so every op reads the disk.
 * <ul>
 * <li>{@link #readIntoRegions} (ours): the daemon's loader ({@link CheckpointLoader}, {@code threads} threads, the
 * digest taken as it reads, O_DIRECT for what is not cached) into regions of {@code backend} made by the daemon's own
 * factory before the op (not timed: cuda-vmm's creation is the driver's, measured by the daemon's STATUS); the pages
 * of memfd regions are allocated by the reads, as in the daemon.</li>
 * <li>{@link #preadIntoAnonymous} (baseline, the issue's): {@code pread} of the same bytes in 16 MiB chunks on as many
 * threads into anonymous memory faulted in before the op.</li>
 * <li>{@link #readIntoAnonymous} (diagnostic): the loader into the baselines' faulted-in anonymous memory.</li>
 * <li>{@link #directRead} (baseline for a cold disk): the same with O_DIRECT, whole files in 16 MiB aligned
 * pieces.</li>
 * <li>{@link #ddDirect} (the disk's own rate as an operator measures it): {@code dd iflag=direct bs=16M} of each file
 * to /dev/null, one stream.</li>
 * <li>{@link #memcpy}: the machine's memory bandwidth with the same threads: as many bytes copied between two
 * faulted-in anonymous areas in 16 MiB pieces.</li>
 * </ul>
 * The whole start, from the process's start to ready, is {@link DaemonRestartBench#reload} on the same checkpoint.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 1)
@Measurement(iterations = 3)
@Fork(1)
public class ColdStartBench {
    static final String CHECKPOINT_ENV = "ENGRAM_BENCH_CHECKPOINT";
    static final long PIECE = 16L << 20;
    static final long ALIGN = 4096;

    @Param({"4"})
    public int threads;

    /** warm: the checkpoint is in the page cache; cold: its pages are dropped before every op. */
    @Param({"warm"})
    public String cache;

    /** Used when {@code $ENGRAM_BENCH_CHECKPOINT} is not set. */
    @Param({"256"})
    public long checkpointMiB;

    private String method;
    private Path generated;
    private OpenCheckpoint open;
    private List<TensorInfo> tensors;
    private List<Path> files;
    private long totalBytes;
    private ExecutorService pool;
    private final List<AutoCloseable> perOp = new ArrayList<>();
    private Mapping source;
    private Mapping target;

    /** readIntoRegions' destination: a region of {@code backend} per tensor, made before each op by the daemon's factory. */
    @State(Scope.Benchmark)
    public static class Regions {
        /** memfd, memfd-hugetlb or cuda-vmm (a parameter of readIntoRegions only, so the baselines run once). */
        @Param({"memfd"})
        public String backend;

        final Map<TensorInfo, Long> address = new IdentityHashMap<>();
        private final List<HostRegion> made = new ArrayList<>();

        @Setup(Level.Invocation)
        public void create(ColdStartBench bench) {
            HostRegionFactory factory = switch (backend) {
                case "memfd" -> HostRegionFactory.memfd(PageKind.SMALL, NumaPolicy.none());
                case "memfd-hugetlb" -> HostRegionFactory.memfd(PageKind.HUGE_2M, NumaPolicy.none());
                case "cuda-vmm" -> HostRegionFactory.vmm(0, 0);
                default -> throw new IllegalArgumentException("backend: '" + backend + "' is not one of memfd,"
                        + " memfd-hugetlb, cuda-vmm");
            };
            address.clear();
            for (TensorInfo t : bench.tensors) {
                if (t.length() == 0) {
                    continue;
                }
                long g = factory.granule();
                HostRegion r = factory.create(made.size(), (t.length() + g - 1) / g * g);
                made.add(r);
                address.put(t, r.address());
            }
        }

        @TearDown(Level.Invocation)
        public void close() {
            for (int i = made.size() - 1; i >= 0; i--) {
                made.get(i).close();
            }
            made.clear();
        }
    }

    @Setup(Level.Trial)
    public void setUp(BenchmarkParams params) throws IOException {
        String b = params.getBenchmark();
        setUp(b.substring(b.lastIndexOf('.') + 1));
    }

    /** The trial's setup for the benchmark method named {@code benchmarkMethod}. */
    void setUp(String benchmarkMethod) throws IOException {
        method = benchmarkMethod;
        if (!cache.equals("warm") && !cache.equals("cold")) {
            throw new IllegalArgumentException("cache: '" + cache + "' is not one of warm, cold");
        }
        String given = System.getenv(CHECKPOINT_ENV);
        Path checkpoint;
        if (given != null && !given.isBlank()) {
            checkpoint = Path.of(given);
        } else {
            generated = Files.createTempDirectory("engram-coldstart-");
            long rows = checkpointMiB * (1L << 20) / 2 / 264;
            checkpoint = CheckpointGenerator.writeSingle(generated.resolve("ckpt"),
                    new CheckpointGenerator.Spec(List.of(1, 14), rows, 256, 7));
        }
        open = OpenCheckpoint.open(checkpoint);
        tensors = open.checkpoint().tensors();
        totalBytes = Checkpoint.totalBytes(tensors);
        Set<Path> f = new LinkedHashSet<>();
        tensors.forEach(t -> f.add(t.file()));
        files = List.copyOf(f);
        pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "bench-coldstart");
            t.setDaemon(true);
            return t;
        });
        if (cache.equals("warm")) {
            try (Mapping scratch = Posix.mmapAnonymous(totalBytes, "page-cache warm-up");
                    ParallelPread pread = new ParallelPread(threads)) {
                pread.read(tensors, scratch.address());
            }
        }
    }

    @Setup(Level.Invocation)
    public void prepare() throws Exception {
        if (cache.equals("cold")) {
            for (Path p : files) {
                try (Fd fd = Posix.open(p, Posix.O_RDONLY, 0)) {
                    PageCache.drop(fd);
                    long left = PageCache.residentPages(fd, Posix.size(fd));
                    if (left != 0) {
                        throw new IllegalStateException("cache=cold: " + left + " pages of " + p + " stay in the page"
                                + " cache after posix_fadvise(DONTNEED) (tmpfs?)");
                    }
                }
            }
        }
        switch (method) {
            case "preadIntoAnonymous", "directRead", "readIntoAnonymous" -> target = faultedIn(totalFileBytes(), "coldstart target");
            case "memcpy" -> {
                source = faultedIn(totalBytes, "memcpy source");
                target = faultedIn(totalBytes, "memcpy target");
            }
            default -> { }
        }
    }

    private long totalFileBytes() throws IOException {
        long n = 0;
        for (Path p : files) {
            n += (Files.size(p) + ALIGN - 1) / ALIGN * ALIGN;
        }
        return Math.max(n, totalBytes);
    }

    /** Anonymous memory of {@code bytes}, every page written (in parallel, not timed). */
    private Mapping faultedIn(long bytes, String what) throws Exception {
        Mapping m = Posix.mmapAnonymous(bytes, what);
        perOp.add(m);
        List<Future<?>> done = new ArrayList<>();
        for (long off = 0; off < bytes; off += PIECE) {
            long o = off;
            done.add(pool.submit(() -> RawMemory.fill(m.address() + o, Math.min(PIECE, bytes - o), (byte) 1)));
        }
        for (Future<?> f : done) {
            f.get();
        }
        return m;
    }

    @TearDown(Level.Invocation)
    public void release() throws Exception {
        for (int i = perOp.size() - 1; i >= 0; i--) {
            perOp.get(i).close();
        }
        perOp.clear();
        source = null;
        target = null;
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        if (pool != null) {
            pool.shutdownNow();
        }
        if (open != null) {
            open.close();
        }
        if (generated != null) {
            try (var s = Files.walk(generated)) {
                for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                    Files.delete(p);
                }
            }
        }
    }

    /** The target of the last pread, directRead or memcpy (tests check its bytes). */
    Mapping target() {
        return target;
    }

    List<TensorInfo> tensors() {
        return tensors;
    }

    /** Ours: the daemon's loader, digest included, into fresh regions of the backend. */
    @Benchmark
    public long readIntoRegions(Regions regions) {
        CheckpointLoader.Result r = new CheckpointLoader(threads).load(open, tensors, regions.address::get);
        if (r.bytes() != totalBytes) {
            throw new IllegalStateException("read " + r.bytes() + " of " + totalBytes + " bytes");
        }
        return r.digests().values().stream().mapToLong(Long::longValue).sum();
    }

    /**
     * Diagnostic: the daemon's loader, digest included, into the faulted-in anonymous memory the baselines read
     * into (what the loader costs apart from the regions' own page allocation).
     */
    @Benchmark
    public long readIntoAnonymous() {
        Map<TensorInfo, Long> at = new HashMap<>();
        long next = 0;
        for (TensorInfo t : tensors) {
            at.put(t, target.address() + next);
            next += t.length();
        }
        CheckpointLoader.Result r = new CheckpointLoader(threads).load(open, tensors, at::get);
        if (r.bytes() != totalBytes) {
            throw new IllegalStateException("read " + r.bytes() + " of " + totalBytes + " bytes");
        }
        return r.digests().values().stream().mapToLong(Long::longValue).sum();
    }

    /** Baseline: pread into faulted-in anonymous memory, same threads. */
    @Benchmark
    public long preadIntoAnonymous() throws Exception {
        List<Future<?>> done = new ArrayList<>();
        long at = 0;
        for (TensorInfo t : tensors) {
            Fd fd = open.fd(t);
            for (long off = 0; off < t.length(); off += PIECE) {
                long dst = target.address() + at + off;
                long len = Math.min(PIECE, t.length() - off);
                long fileOffset = t.offset() + off;
                done.add(pool.submit(() -> Posix.preadFully(fd, dst, len, fileOffset)));
            }
            at += t.length();
        }
        for (Future<?> f : done) {
            f.get();
        }
        return at;
    }

    /** Baseline for a cold disk: every file read whole with O_DIRECT in 16 MiB pieces, same threads. */
    @Benchmark
    public long directRead() throws Exception {
        List<Fd> fds = new ArrayList<>();
        try {
            List<Future<?>> done = new ArrayList<>();
            long at = 0;
            for (Path p : files) {
                Fd fd = Posix.open(p, Posix.O_RDONLY | Arch.current().oDirect(), 0);
                fds.add(fd);
                long size = Posix.size(fd);
                for (long off = 0; off < size; off += PIECE) {
                    long dst = target.address() + at + off;
                    long len = Math.min(PIECE, (size - off + ALIGN - 1) / ALIGN * ALIGN);
                    long o = off;
                    done.add(pool.submit(() -> Posix.preadAtMost(fd, dst, len, o)));
                }
                at += (size + ALIGN - 1) / ALIGN * ALIGN;
            }
            long bytes = 0;
            for (Future<?> f : done) {
                bytes += (Long) f.get();
            }
            return bytes;
        } finally {
            for (Fd fd : fds) {
                fd.close();
            }
        }
    }

    /** The disk's own sequential rate: dd with O_DIRECT, 16 MiB requests, one stream per file in turn. */
    @Benchmark
    public int ddDirect() throws Exception {
        int sum = 0;
        for (Path p : files) {
            Process dd = new ProcessBuilder("dd", "if=" + p, "of=/dev/null", "bs=16M", "iflag=direct")
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
            if (dd.waitFor() != 0) {
                throw new IllegalStateException("dd if=" + p + " iflag=direct exited " + dd.exitValue());
            }
            sum += dd.exitValue();
        }
        return sum;
    }

    /** The machine's memcpy bandwidth, same threads, as many bytes as the tables. */
    @Benchmark
    public long memcpy() throws Exception {
        List<Future<?>> done = new ArrayList<>();
        for (long off = 0; off < totalBytes; off += PIECE) {
            long o = off;
            long len = Math.min(PIECE, totalBytes - off);
            done.add(pool.submit(() -> RawMemory.copy(null, source.address() + o, null, target.address() + o, len)));
        }
        for (Future<?> f : done) {
            f.get();
        }
        return totalBytes;
    }
}
