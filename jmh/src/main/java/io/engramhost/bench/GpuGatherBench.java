package io.engramhost.bench;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Warmup;

/**
 * GPU gather: {@code gatherRows} random rows of {@code rowBytes} bytes gathered by a GPU kernel (one warp per
 * row) through each backend's GPU view of one resident table of {@code tableMiB} into a device buffer (GPU
 * machines only: every state's setup throws, naming the cause, where CUDA is not available). The baseline is
 * a sequential read by the GPU of exactly as many bytes ({@code gatherRows * rowBytes}, rounded up to 16)
 * contiguously from the same table: the PCIe ceiling. The ratio of the two times is the gather's bandwidth
 * as a fraction of the ceiling; {@code gatherRows * rowBytes / time} is its GB/s, {@code gatherRows / time}
 * its rows/s. Comparing one kind of method across backends (at identical parameters) shows whether the
 * backends differ.
 *
 * <p>The table is created once per trial by the daemon-side code on GPU 0's NUMA node (as {@code --numa auto}
 * places it), filled with pseudo-random bytes, and given a GPU view as a client does: a memfd of 4 KiB pages,
 * or of 2 MiB hugetlb pages, mapped PROT_READ and registered (cuMemHostRegister READ_ONLY); or a cuda-vmm
 * HOST_NUMA allocation whose fd is imported with GPU read access. Row ids are uniform over the table's rows,
 * drawn from a fixed seed (the same on every backend) into device memory at setup; the ops cycle through
 * {@link GpuGatherTables#BATCHES} batches, and the sequential reads through as many consecutive windows of the
 * table (wrapping at its end), so that an op does not read the rows the op before it read (and may have left in
 * the GPU's L2). One op waits for its kernel, and pays tens of microseconds of memset, launch and result copy
 * besides (the same for gather and sequential; more where a sequential window wraps round the table's end).
 * Setup checks that the first gathered rows and the table's first bytes read on the GPU are the bytes the CPU
 * sees there.
 *
 * <p>Baselines, the engines' own path: an engine that does not use engram-host pins its own copy of the table in
 * its own process, with {@code cuMemHostAlloc} (PyTorch's pinned allocator; {@code gatherPinnedAlloc}) or by
 * registering anonymous memory it filled ({@code cuMemHostRegister}, read-write; {@code gatherPinnedRegister}).
 * Same kernel, row ids, fill and parameters as our views; the target (issue 14) is that a gather through each of
 * our views reaches at least 0.98 of each baseline's rows/s (the report's ratio: baseline time / ours).
 *
 * <p>Memory: every method runs in a JVM of its own ({@code @Fork(1)}: one fork per method and parameter set), and
 * each method uses one state, whose table is made at the trial's setup and freed at its teardown; even with
 * {@code -f 0} JMH tears a trial's states down before the next benchmark's setup. So one table is alive at a time.
 * Peak host memory of a run: one table of {@code tableMiB} (rounded up to its pages: 40 GiB at the largest
 * default), plus about 100 MiB (row ids, {@code 32 * gatherRows} bytes; the setup check's copies) and the JVM's
 * own. The hugetlb pool is reserved beside it for the whole run ({@code tableMiB / 2} pages at least for
 * {@code gatherMemfdHugetlb}). GPU memory: the output buffer, {@code gatherRows * rowBytes} (1 GiB at 1024-byte
 * rows), and the row ids.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 500, timeUnit = TimeUnit.MILLISECONDS)
@Measurement(iterations = 5, time = 500, timeUnit = TimeUnit.MILLISECONDS)
@Fork(1)
public class GpuGatherBench {
    /** Gather through a 4 KiB-page memfd, mapped read-only and registered. */
    @Benchmark
    public int gatherMemfd(GpuGatherTables.Memfd4k table) {
        return table.gather();
    }

    /** Gather through a 2 MiB hugetlb memfd, mapped read-only and registered. */
    @Benchmark
    public int gatherMemfdHugetlb(GpuGatherTables.MemfdHuge table) {
        return table.gather();
    }

    /** Gather through a cuda-vmm HOST_NUMA import (cuMemMap, GPU read access). */
    @Benchmark
    public int gatherVmm(GpuGatherTables.HostNuma table) {
        return table.gather();
    }

    /** Baseline, an engine's own copy: gather from cuMemHostAlloc memory (DEVICEMAP|PORTABLE). */
    @Benchmark
    public int gatherPinnedAlloc(GpuGatherTables.PinnedAlloc table) {
        return table.gather();
    }

    /** Baseline, an engine's own copy: gather from anonymous memory registered read-write (cuMemHostRegister). */
    @Benchmark
    public int gatherPinnedRegister(GpuGatherTables.PinnedRegister table) {
        return table.gather();
    }

    /** Baseline: the same bytes' worth read contiguously from the 4 KiB-page memfd. */
    @Benchmark
    public long sequentialMemfd(GpuGatherTables.Memfd4k table) {
        return table.readSequential();
    }

    /** Baseline: the same bytes' worth read contiguously from the hugetlb memfd. */
    @Benchmark
    public long sequentialMemfdHugetlb(GpuGatherTables.MemfdHuge table) {
        return table.readSequential();
    }

    /** Baseline: the same bytes' worth read contiguously from the cuda-vmm import. */
    @Benchmark
    public long sequentialVmm(GpuGatherTables.HostNuma table) {
        return table.readSequential();
    }

    /** Baseline: the same bytes' worth read contiguously from the cuMemHostAlloc copy. */
    @Benchmark
    public long sequentialPinnedAlloc(GpuGatherTables.PinnedAlloc table) {
        return table.readSequential();
    }

    /** Baseline: the same bytes' worth read contiguously from the registered anonymous copy. */
    @Benchmark
    public long sequentialPinnedRegister(GpuGatherTables.PinnedRegister table) {
        return table.readSequential();
    }
}
