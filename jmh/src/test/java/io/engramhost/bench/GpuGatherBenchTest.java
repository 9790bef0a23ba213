package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaResources;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.ToIntFunction;
import java.util.function.ToLongFunction;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

@Timeout(300)
class GpuGatherBenchTest {
    private static final GpuGatherBench BENCH = new GpuGatherBench();

    private static List<GpuGatherTables.Table> everyBackend() {
        return List.of(new GpuGatherTables.Memfd4k(), new GpuGatherTables.MemfdHuge(), new GpuGatherTables.HostNuma(),
                new GpuGatherTables.PinnedAlloc(), new GpuGatherTables.PinnedRegister());
    }

    @Test
    void shouldSkipItselfNamingTheCauseWithoutCuda() {
        Assumptions.assumeFalse(Cuda.available(), "CUDA is available here: the skip path cannot be seen");
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        for (GpuGatherTables.Table t : everyBackend()) {
            t.tableMiB = 64;
            t.rowBytes = 264;
            t.gatherRows = 1024;
            IllegalStateException e = assertThrows(IllegalStateException.class, t::setUp, t.getClass().getSimpleName());
            assertTrue(e.getMessage().startsWith("GpuGatherBench needs a CUDA GPU: " + Cuda.unavailabilityCause()),
                    e.getMessage());
            t.tearDown(); // nothing was made: nothing to close, and no error
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    /**
     * What keeps a 40 GiB run within the machine's memory: each method forks a JVM of its own and uses one state
     * (one table), made per trial; and the sizes and rows the issue asks for are the defaults.
     */
    @Test
    void shouldHoldOneTableAtATimeAtTheSizesAndRowsAsked() throws Exception {
        assertEquals(1, GpuGatherBench.class.getAnnotation(Fork.class).value());
        int methods = 0;
        for (Method m : GpuGatherBench.class.getMethods()) {
            if (m.isAnnotationPresent(Benchmark.class)) {
                methods++;
                assertEquals(1, m.getParameterCount(), m.getName());
                Class<?> state = m.getParameterTypes()[0];
                assertTrue(GpuGatherTables.Table.class.isAssignableFrom(state), m.getName());
                assertEquals(Scope.Benchmark, state.getAnnotation(State.class).value(), m.getName());
            }
        }
        assertEquals(10, methods, "five tables, each gathered and read sequentially");
        assertEquals(Level.Trial, GpuGatherTables.Table.class.getMethod("setUp").getAnnotation(Setup.class).value());
        assertEquals(Level.Trial,
                GpuGatherTables.Table.class.getMethod("tearDown").getAnnotation(TearDown.class).value());
        assertArrayEquals(new String[] {"2048", "16384", "40960"}, GpuGatherTables.Table.class.getField("tableMiB")
                .getAnnotation(Param.class).value());
        assertArrayEquals(new String[] {"64", "264", "1024"}, GpuGatherTables.Table.class.getField("rowBytes")
                .getAnnotation(Param.class).value());
    }

    @Test
    void shouldReadExactlyTheBytesAskedWrappingAtTheTablesEnd() {
        assertEquals(List.of(List.of(0L, 64L)), pieces(0, 64, 256));
        assertEquals(List.of(List.of(224L, 32L), List.of(0L, 32L)), pieces(224, 64, 256));
        assertEquals(List.of(List.of(16L, 240L), List.of(0L, 256L), List.of(0L, 112L)), pieces(16, 608, 256));
        assertEquals(List.of(), pieces(32, 0, 256));
        assertEquals(3L ^ 5L, GpuGatherTables.readWrapped(224, 64, 256, (at, n) -> at == 0 ? 3 : 5));
        for (long[] bad : new long[][] {{8, 64, 256}, {0, 8, 256}, {256, 16, 256}, {-16, 16, 256}, {0, 16, 8}}) {
            assertThrows(IllegalArgumentException.class,
                    () -> GpuGatherTables.readWrapped(bad[0], bad[1], bad[2], (at, n) -> 0));
        }
    }

    private static List<List<Long>> pieces(long start, long length, long limit) {
        List<List<Long>> reads = new ArrayList<>();
        GpuGatherTables.readWrapped(start, length, limit, (at, n) -> {
            reads.add(List.of(at, n));
            return 0;
        });
        assertEquals(length, reads.stream().mapToLong(r -> r.get(1)).sum());
        return reads;
    }

    @Test
    void shouldPlaceTheWindowsOneAfterAnotherThroughTheTable() {
        long mib = 1L << 20;
        for (int w = 0; w < GpuGatherTables.BATCHES; w++) {
            assertEquals(w * 64 * mib, GpuGatherTables.windowStart(w, 64 * mib, 2048 * mib));
            assertEquals(w % 2 * 1024 * mib, GpuGatherTables.windowStart(w, 1024 * mib, 2048 * mib));
        }
        assertEquals(16 * mib, GpuGatherTables.windowStart(3, 24 * mib, 56 * mib));
    }

    @Test
    void shouldDrawTheSameUniformRowIdsFromTheSeed() {
        int count = 100_000;
        long rows = 1000;
        try (Mapping a = Posix.mmapAnonymous(8L * count, "ids a"); Mapping b = Posix.mmapAnonymous(8L * count, "ids b")) {
            GpuGatherTables.drawRowIds(a.address(), count, rows, GpuGatherTables.ROW_ID_SEED);
            GpuGatherTables.drawRowIds(b.address(), count, rows, GpuGatherTables.ROW_ID_SEED);
            Set<Long> seen = new HashSet<>();
            for (int i = 0; i < count; i++) {
                long id = RawMemory.getLong(a.address() + 8L * i);
                assertEquals(id, RawMemory.getLong(b.address() + 8L * i), "same seed, same ids");
                assertTrue(id >= 0 && id < rows, "id " + id);
                seen.add(id);
            }
            assertEquals(rows, seen.size(), "100 draws per row on average: every row drawn");
        }
    }

    @Test
    void shouldFillEachChunkFromItsOwnSeedWhateverTheThreads() {
        long length = NativeMemory.FILL_CHUNK + 64;
        try (Mapping table = Posix.mmapAnonymous(length, "table"); Mapping ref = Posix.mmapAnonymous(64, "reference")) {
            NativeMemory.fillRandomParallel(table.address(), length, GpuGatherTables.FILL_SEED);
            byte[] got = new byte[64];
            byte[] expected = new byte[64];
            for (int chunk = 0; chunk < 2; chunk++) {
                NativeMemory.fillRandom(ref.address(), 64, NativeMemory.chunkSeed(GpuGatherTables.FILL_SEED, chunk));
                RawMemory.copy(ref.address(), expected, 0, 64);
                RawMemory.copy(table.address() + chunk * NativeMemory.FILL_CHUNK, got, 0, 64);
                assertArrayEquals(expected, got, "chunk " + chunk);
            }
            assertNotEquals(0L, GpuGatherTables.xorWords(table.address(), length));
            assertThrows(IllegalArgumentException.class, () -> NativeMemory.fillRandomParallel(table.address(), 12, 1));
        }
    }

    @Test
    @Tag("gpu")
    void shouldGatherTheTablesRowsAndReadAsManyBytesOnEveryBackend() throws Exception {
        Assumptions.assumeTrue(Cuda.available(), () -> "no CUDA: " + Cuda.unavailabilityCause());
        warmUp();
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        int cudaBefore = CudaResources.live();
        boolean huge = Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim()) >= 32;
        for (int rowBytes : new int[] {64, 264, 1024}) {
            check(new GpuGatherTables.Memfd4k(), 64, rowBytes, 16384, BENCH::gatherMemfd, BENCH::sequentialMemfd);
            check(new GpuGatherTables.HostNuma(), 64, rowBytes, 16384, BENCH::gatherVmm, BENCH::sequentialVmm);
            check(new GpuGatherTables.PinnedAlloc(), 64, rowBytes, 16384, BENCH::gatherPinnedAlloc,
                    BENCH::sequentialPinnedAlloc);
            check(new GpuGatherTables.PinnedRegister(), 64, rowBytes, 16384, BENCH::gatherPinnedRegister,
                    BENCH::sequentialPinnedRegister);
            if (huge) {
                check(new GpuGatherTables.MemfdHuge(), 64, rowBytes, 16384, BENCH::gatherMemfdHugetlb,
                        BENCH::sequentialMemfdHugetlb);
            }
        }
        // More bytes per op than the table holds, and rows whose bytes are no multiple of 8 or 16: the
        // sequential reads wrap round the table, the gather copies byte by byte.
        check(new GpuGatherTables.Memfd4k(), 4, 1024, 8192, BENCH::gatherMemfd, BENCH::sequentialMemfd);
        check(new GpuGatherTables.HostNuma(), 4, 100, 1001, BENCH::gatherVmm, BENCH::sequentialVmm);
        check(new GpuGatherTables.PinnedAlloc(), 4, 100, 1001, BENCH::gatherPinnedAlloc, BENCH::sequentialPinnedAlloc);
        check(new GpuGatherTables.PinnedRegister(), 4, 1024, 8192, BENCH::gatherPinnedRegister,
                BENCH::sequentialPinnedRegister);
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "every table and view released");
        assertEquals(cudaBefore, CudaResources.live(), "every CUDA resource released");
    }

    @Test
    @Tag("gpu")
    void shouldReleaseWhatASetupMadeWhenItFailsHalfWay() {
        Assumptions.assumeTrue(Cuda.available(), () -> "no CUDA: " + Cuda.unavailabilityCause());
        warmUp();
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        int cudaBefore = CudaResources.live();
        for (GpuGatherTables.Table t : List.of(new GpuGatherTables.Memfd4k(), new GpuGatherTables.HostNuma(),
                new GpuGatherTables.PinnedAlloc(), new GpuGatherTables.PinnedRegister())) {
            t.tableMiB = 16;
            t.rowBytes = 4096;
            t.gatherRows = 1 << 30; // a 4 TiB output buffer: cuMemAlloc fails once the table is attached
            RuntimeException e = assertThrows(RuntimeException.class, t::setUp);
            assertTrue(e.getMessage().contains("gathered rows"), e.getMessage());
            t.tearDown();
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "the tables and views made before the failure released");
        assertEquals(cudaBefore, CudaResources.live());
    }

    /**
     * One whole setup and teardown before the fds are counted: the driver opens fds of its own the first
     * time a process makes a context, loads a module or registers memory (seen on the H200, where this
     * test ran first in its JVM), and those stay open by design.
     */
    private static void warmUp() {
        for (GpuGatherTables.Table t : List.of(new GpuGatherTables.HostNuma(), new GpuGatherTables.Memfd4k())) {
            t.tableMiB = 4;
            t.rowBytes = 64;
            t.gatherRows = 1024;
            t.setUp();
            t.tearDown();
        }
    }

    /**
     * Sets {@code t} up, gathers every batch (and the first again) and compares each gathered row with the
     * table's bytes at its id read on the CPU, reads as many windows sequentially and compares each with
     * the CPU's XOR of the same bytes, tears down.
     */
    private static <T extends GpuGatherTables.Table> void check(T t, long tableMiB, int rowBytes, int gatherRows,
            ToIntFunction<T> gather, ToLongFunction<T> sequential) {
        String what = t.getClass().getSimpleName() + " " + tableMiB + " MiB, " + gatherRows + " x " + rowBytes + ": ";
        t.tableMiB = tableMiB;
        t.rowBytes = rowBytes;
        t.gatherRows = gatherRows;
        t.setUp();
        try {
            assertEquals((tableMiB << 20) / rowBytes, t.tableRows(), what);
            assertEquals(((long) gatherRows * rowBytes + 15) / 16 * 16, t.sequentialBytes(), what);
            int bytes = gatherRows * rowBytes;
            byte[] got = new byte[bytes];
            byte[] expected = new byte[bytes];
            byte[] previous = null;
            try (Mapping host = Posix.mmapAnonymous(bytes, "gathered rows")) {
                for (int op = 0; op <= GpuGatherTables.BATCHES; op++) {
                    int batch = gather.applyAsInt(t);
                    assertEquals(op % GpuGatherTables.BATCHES, batch, what + "the batches cycle");
                    t.out().copyToHost(0, host.address(), bytes);
                    RawMemory.copy(host.address(), got, 0, bytes);
                    for (int i = 0; i < gatherRows; i++) {
                        long id = t.rowId(batch, i);
                        assertTrue(id >= 0 && id < t.tableRows(), what + "id " + id);
                        RawMemory.copy(t.hostTable() + id * rowBytes, expected, i * rowBytes, rowBytes);
                    }
                    assertArrayEquals(expected, got, what + "batch " + batch);
                    assertFalse(java.util.Arrays.equals(got, previous), what + "each batch gathers other rows");
                    assertNotEquals(0L, GpuGatherTables.xorWords(host.address(), bytes / 8 * 8), what + "random bytes");
                    previous = got.clone();
                }
            }
            for (int op = 0; op <= GpuGatherTables.BATCHES; op++) {
                long start = GpuGatherTables.windowStart(op % GpuGatherTables.BATCHES, t.sequentialBytes(), t.limit());
                long cpu = GpuGatherTables.readWrapped(start, t.sequentialBytes(), t.limit(),
                        (at, n) -> GpuGatherTables.xorWords(t.hostTable() + at, n));
                assertEquals(cpu, sequential.applyAsLong(t), what + "window " + op);
            }
        } finally {
            t.tearDown();
        }
    }
}
