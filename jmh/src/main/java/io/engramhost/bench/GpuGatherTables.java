package io.engramhost.bench;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaDevice;
import io.engramhost.cuda.DeviceBuffer;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.cuda.HostRegistration;
import io.engramhost.cuda.PinnedHostBuffer;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.numa.Numa;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.numa.PolicySpec;
import io.engramhost.numa.Topology;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import io.engramhost.vmm.Access;
import io.engramhost.vmm.HostNumaAllocation;
import io.engramhost.vmm.VmmImport;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * The tables {@link GpuGatherBench} reads: one per trial and backend, created by the daemon-side code
 * (on GPU 0's NUMA node, as the daemon's {@code --numa auto} places them), filled with pseudo-random
 * bytes, then given a GPU view exactly as a client does; or, for the baselines, pinned by the benchmark's
 * own process as an engine pins its own copy ({@link PinnedAlloc}, {@link PinnedRegister}). With the row
 * ids, the output buffer and the kernels the GPU reads them with. One {@link State} class per backend, so
 * that a method can be compared across backends at identical parameters; every backend draws the same row
 * ids and holds the same bytes.
 */
public final class GpuGatherTables {
    /** Row id batches drawn per trial; the ops cycle through them, and the sequential reads through as many windows. */
    static final int BATCHES = 4;
    static final long ROW_ID_SEED = 42;
    static final long FILL_SEED = 0x5eed6a7e0000L;
    /** Bytes' worth of the first batch's rows (at least one row) that setup checks against the table. */
    static final long CHECKED_ROW_BYTES = 4L << 20;
    /** Bytes at the table's start that setup reads on the GPU and the CPU and compares. */
    static final long CHECKED_BYTES = 64L << 20;
    static final String BENCHMARK = "GpuGatherBench";
    private static final String NAME = "engram.bench.gpu-gather";

    private GpuGatherTables() {
    }

    /** Reads {@code length} bytes at {@code offset} of the table (both multiples of 16); returns the XOR of its words. */
    @FunctionalInterface
    interface SequentialReader {
        long read(long offset, long length);
    }

    /**
     * Reads {@code length} bytes of the table from {@code start}, wrapping to the table's start at
     * {@code limit} (its readable bytes): as many reads as it takes, {@code length} bytes in all. Returns
     * the XOR of every 8-byte word read.
     */
    static long readWrapped(long start, long length, long limit, SequentialReader reader) {
        if (start < 0 || start >= limit || length < 0 || start % 16 != 0 || length % 16 != 0 || limit % 16 != 0) {
            throw new IllegalArgumentException("sequential read of " + length + " bytes from " + start + " of "
                    + limit + ": need 0 <= start < limit, and all three multiples of 16");
        }
        long xor = 0;
        long at = start;
        long left = length;
        while (left > 0) {
            long n = Math.min(left, limit - at);
            xor ^= reader.read(at, n);
            left -= n;
            at = 0;
        }
        return xor;
    }

    /** Where sequential window {@code window} starts: windows follow each other through the table, wrapping. */
    static long windowStart(int window, long windowBytes, long limit) {
        return Math.floorMod(Math.multiplyExact((long) window, windowBytes), limit);
    }

    /** {@code count} row ids (u64) uniform over {@code [0, tableRows)} from {@code seed}, written at {@code address}. */
    static void drawRowIds(long address, long count, long tableRows, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        for (long i = 0; i < count; i++) {
            RawMemory.putLong(address + 8 * i, random.nextLong(tableRows));
        }
    }

    /** The XOR of every 8-byte word of {@code [address, address + length)} ({@code length} a multiple of 8). */
    static long xorWords(long address, long length) {
        long x = 0;
        for (long at = 0; at < length; at += 8) {
            x ^= RawMemory.getLong(address + at);
        }
        return x;
    }

    /**
     * Where the daemon puts GPU 0's tables with {@code --numa auto}: the memfd policy (bind to the GPU's
     * node where there are several nodes, none otherwise) and the HOST_NUMA node. Where this process may
     * not call mbind (a container's seccomp profile) the memfd tables get no policy, as with the daemon's
     * {@code --numa none}, and a line on stderr says so: their pages may then lie on another node than the
     * HOST_NUMA table's, which the comparison of backends must take into account.
     */
    record TablePlacement(NumaPolicy memfdPolicy, int vmmNode) {
        static TablePlacement ofGpu0() {
            CudaDevice d = Cuda.device(0);
            Topology topology = Topology.read();
            OptionalInt sysfs = topology.gpuNode(d.pciBusId());
            OptionalInt node = sysfs.isPresent() ? sysfs
                    : d.hostNumaId() >= 0 ? OptionalInt.of(d.hostNumaId()) : OptionalInt.empty();
            NumaPolicy memfd = PolicySpec.resolveAuto(topology, List.of(node)).validate(topology);
            if (memfd != NumaPolicy.none()) {
                Optional<String> refused = Numa.probe();
                if (refused.isPresent()) {
                    System.err.println(BENCHMARK + ": the memfd tables are placed without a NUMA policy (not "
                            + memfd + "): " + refused.get());
                    memfd = NumaPolicy.none();
                }
            }
            return new TablePlacement(memfd, sysfs.isPresent() ? sysfs.getAsInt() : Math.max(d.hostNumaId(), 0));
        }
    }

    /**
     * One backend's table with its GPU view, the row ids and output buffer of the gather, and the kernels:
     * everything made in {@link #setUp()} and owned here, closed in reverse order by {@link #tearDown()} (or
     * by a setup that fails half way). Its subclasses are the states the benchmarks use (JMH wants the
     * parameters' class to be a state too).
     */
    @State(Scope.Benchmark)
    public abstract static class Table {
        /**
         * Table size in MiB (the backends round it up to their pages; rows and reads stay within this): 2 GiB,
         * 16 GiB and 40 GiB by default. A run holds one table at a time (see {@link GpuGatherBench}).
         */
        @Param({"2048", "16384", "40960"})
        public long tableMiB;

        @Param({"64", "264", "1024"})
        public int rowBytes;

        /** Rows gathered per op; the sequential baseline reads as many bytes ({@code gatherRows * rowBytes}). */
        @Param({"1048576"})
        public int gatherRows;

        private final List<AutoCloseable> owned = new ArrayList<>();
        private GpuKernels kernels;
        private Mapping hostRowIds;
        private DeviceBuffer rowIds;
        private DeviceBuffer out;
        private long deviceTable;
        private long hostTable;
        private long tableRows;
        private long limit;
        private long sequentialBytes;
        private int nextBatch;
        private int nextWindow;

        /**
         * Creates the table on the daemon side, fills it, and gives it a GPU view as a client does; keeps
         * every owner with {@link #keep}. Returns the view's device address of the table's first byte and
         * sets {@link #hostTable(long)} to a CPU address of the same bytes (for the checks).
         */
        abstract long createAndView(long bytes, TablePlacement placement);

        @Setup(Level.Trial)
        public void setUp() {
            AttachTables.requireCuda(GpuGatherBench.class);
            long bytes = tableMiB << 20;
            if (tableMiB < 1 || rowBytes < 1 || gatherRows < 1 || bytes / rowBytes < 1) {
                throw new IllegalArgumentException(BENCHMARK + ": tableMiB " + tableMiB + ", rowBytes " + rowBytes
                        + " and gatherRows " + gatherRows + " must be positive, with at least one row in the table");
            }
            try {
                tableRows = bytes / rowBytes;
                limit = bytes;
                long outBytes = Math.multiplyExact((long) gatherRows, rowBytes);
                sequentialBytes = (outBytes + 15) & ~15L;
                deviceTable = createAndView(bytes, TablePlacement.ofGpu0());
                kernels = keep(GpuKernels.load(0));
                out = keep(DeviceBuffer.allocate(outBytes, 0, "gathered rows"));
                long ids = Math.multiplyExact(8L * BATCHES, gatherRows);
                rowIds = keep(DeviceBuffer.allocate(ids, 0, "gather row ids"));
                hostRowIds = keep(Posix.mmapAnonymous(ids, "gather row ids"));
                drawRowIds(hostRowIds.address(), (long) BATCHES * gatherRows, tableRows, ROW_ID_SEED);
                rowIds.copyFromHost(hostRowIds.address(), 0, ids);
                check();
            } catch (RuntimeException e) {
                closeAll(e);
                throw e;
            }
        }

        /** The first rows of batch 0 and the first window must read the table's bytes, or the timings mean nothing. */
        private void check() {
            gather();
            int rows = (int) Math.min(gatherRows, Math.max(1, CHECKED_ROW_BYTES / rowBytes));
            byte[] got = new byte[rows * rowBytes];
            try (Mapping host = Posix.mmapAnonymous(got.length, "gathered rows copied back")) {
                out.copyToHost(0, host.address(), got.length);
                RawMemory.copy(host.address(), got, 0, got.length);
            }
            byte[] expected = new byte[got.length];
            for (int i = 0; i < rows; i++) {
                RawMemory.copy(hostTable + rowId(0, i) * rowBytes, expected, i * rowBytes, rowBytes);
            }
            if (!Arrays.equals(expected, got)) {
                throw new IllegalStateException(BENCHMARK + ": the GPU gathered other bytes than the table holds at"
                        + " the same rows (" + getClass().getSimpleName() + ", rowBytes " + rowBytes + ")");
            }
            long seq = Math.min(Math.min(sequentialBytes, limit), CHECKED_BYTES);
            if (kernels.readSequential(deviceTable, seq) != xorWords(hostTable, seq)) {
                throw new IllegalStateException(BENCHMARK + ": the GPU's sequential read of the table's first "
                        + seq + " bytes disagrees with the CPU's (" + getClass().getSimpleName() + ")");
            }
            nextBatch = 0;
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            closeAll(null);
        }

        /** Gathers the next batch of row ids into the output buffer; returns the batch's index. */
        int gather() {
            int batch = nextBatch;
            nextBatch = (batch + 1) % BATCHES;
            kernels.gather(deviceTable, tableRows, rowBytes, rowIds.pointer() + 8L * batch * gatherRows, gatherRows,
                    out.pointer());
            return batch;
        }

        /** Reads the next window of {@link #sequentialBytes()} contiguous bytes; returns the XOR of its words. */
        long readSequential() {
            int window = nextWindow;
            nextWindow = (window + 1) % BATCHES;
            return readWrapped(windowStart(window, sequentialBytes, limit), sequentialBytes, limit,
                    (at, n) -> kernels.readSequential(deviceTable + at, n));
        }

        /** Makes {@code resource} owned by this table: closed by {@link #tearDown()}, after those kept later. */
        <T extends AutoCloseable> T keep(T resource) {
            owned.add(resource);
            return resource;
        }

        void hostTable(long address) {
            hostTable = address;
        }

        /** Fills {@code bytes} at {@code address} as every backend's table is filled; the checks read it there. */
        void fillHostTable(long address, long bytes) {
            NativeMemory.fillRandomParallel(address, bytes, FILL_SEED);
            hostTable(address);
        }

        /** A CPU address of the table's first byte (the client's read-only mapping, or the daemon's). */
        long hostTable() {
            return hostTable;
        }

        long tableRows() {
            return tableRows;
        }

        /** The table's bytes the reads stay within: {@code tableMiB} MiB. */
        long limit() {
            return limit;
        }

        long sequentialBytes() {
            return sequentialBytes;
        }

        long rowId(int batch, int i) {
            return RawMemory.getLong(hostRowIds.address() + 8L * ((long) batch * gatherRows + i));
        }

        DeviceBuffer out() {
            return out;
        }

        private void closeAll(RuntimeException cause) {
            RuntimeException failure = cause;
            for (int i = owned.size() - 1; i >= 0; i--) {
                try {
                    owned.get(i).close();
                } catch (Exception e) {
                    if (failure == null) {
                        failure = e instanceof RuntimeException r ? r
                                : new IllegalStateException(BENCHMARK + ": closing " + owned.get(i) + " failed", e);
                    } else {
                        failure.addSuppressed(e);
                    }
                }
            }
            owned.clear();
            kernels = null;
            hostRowIds = null;
            rowIds = null;
            out = null;
            if (cause == null && failure != null) {
                throw failure;
            }
        }
    }

    /** A sealed memfd of {@code pages} as the daemon serves it, mapped read-only and registered as a client does. */
    abstract static class MemfdTable extends Table {
        abstract PageKind pages();

        @Override
        long createAndView(long bytes, TablePlacement placement) {
            NumaPolicy policy = placement.memfdPolicy();
            MemfdRegion region = keep(MemfdRegion.create(NAME, pages().roundUp(bytes), pages(),
                    policy == NumaPolicy.none() ? null : m -> Numa.apply(m, policy)));
            // Every page allocated first, in one call: touching them from the parallel fill is several times slower.
            Posix.madvise(region.writable(), 0, region.size(), Posix.MADV_POPULATE_WRITE);
            NativeMemory.fillRandomParallel(region.writable().address(), region.size(), FILL_SEED);
            region.seal();
            Mapping view = keep(ReadOnlyMapping.map(region.fd(), region.size(), false));
            HostRegistration registration = keep(HostRegistration.register(view.address(), region.size(), 0, true));
            hostTable(view.address());
            return registration.devicePointer();
        }
    }

    /** memfd of 4 KiB pages, mmap PROT_READ, cuMemHostRegister READ_ONLY. */
    @State(Scope.Benchmark)
    public static class Memfd4k extends MemfdTable {
        @Override
        PageKind pages() {
            return PageKind.SMALL;
        }
    }

    /** memfd of 2 MiB hugetlb pages (needs vm.nr_hugepages), mmap PROT_READ, cuMemHostRegister READ_ONLY. */
    @State(Scope.Benchmark)
    public static class MemfdHuge extends MemfdTable {
        @Override
        PageKind pages() {
            return PageKind.HUGE_2M;
        }
    }

    /**
     * Baseline, an engine's own pinned copy: cuMemHostAlloc (DEVICEMAP|PORTABLE) in the benchmark's process, filled
     * through its CPU address. Where its pages lie is the driver's choice (the H200 machine has one NUMA node).
     */
    @State(Scope.Benchmark)
    public static class PinnedAlloc extends Table {
        @Override
        long createAndView(long bytes, TablePlacement placement) {
            PinnedHostBuffer buffer = keep(PinnedHostBuffer.allocate(bytes, 0, NAME));
            fillHostTable(buffer.hostAddress(), bytes);
            return buffer.devicePointer();
        }
    }

    /**
     * Baseline, an engine registering its own copy: private anonymous memory (MAP_PRIVATE|MAP_ANONYMOUS, under the
     * memfd tables' NUMA policy, every page allocated, transparent huge pages as the system sets them), filled,
     * then cuMemHostRegister'd read-write (DEVICEMAP|PORTABLE).
     */
    @State(Scope.Benchmark)
    public static class PinnedRegister extends Table {
        @Override
        long createAndView(long bytes, TablePlacement placement) {
            Mapping memory = keep(Posix.mmapAnonymous(bytes, NAME));
            if (placement.memfdPolicy() != NumaPolicy.none()) {
                Numa.apply(memory, placement.memfdPolicy());
            }
            Posix.madvise(memory, 0, bytes, Posix.MADV_POPULATE_WRITE);
            fillHostTable(memory.address(), bytes);
            return keep(HostRegistration.register(memory.address(), bytes, 0, false)).devicePointer();
        }
    }

    /** cuda-vmm: a HOST_NUMA allocation filled through the daemon's mapping, its fd imported with GPU read access. */
    @State(Scope.Benchmark)
    public static class HostNuma extends Table {
        @Override
        long createAndView(long bytes, TablePlacement placement) {
            HostNumaAllocation allocation = keep(HostNumaAllocation.create(bytes, placement.vmmNode(), NAME));
            fillHostTable(allocation.hostAddress(), allocation.size());
            VmmImport view;
            try (Fd fd = allocation.exportFd()) { // the client closes its fd once attached
                view = keep(VmmImport.attach(List.of(fd), List.of(allocation.size()), 0, Access.READ_ONLY));
            }
            return view.base(0);
        }
    }
}
