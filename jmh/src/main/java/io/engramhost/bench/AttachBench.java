package io.engramhost.bench;

import io.engramhost.cuda.HostRegistration;
import io.engramhost.memfd.ReadOnlyMapping;
import io.engramhost.os.Mapping;
import io.engramhost.protocol.RegionKind;
import io.engramhost.vmm.Access;
import io.engramhost.vmm.VmmImport;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Warmup;

/**
 * What a restarting engine pays to get a view of one resident table of {@code tableMiB}. The table is created
 * once per trial by the daemon-side code; each single shot attaches it as a client does, and the view is released
 * after the shot, outside the timing. Paths: a memfd of 4 KiB pages mapped read-only for the CPU (lazily, or
 * prefaulted), the same registered for the GPU (cuMemHostRegister READ_ONLY), a hugetlb memfd registered, and a
 * cuda-vmm HOST_NUMA allocation imported with GPU access, or GPU and CPU access. GPU machines only, but for the
 * memfd CPU views ({@link #memfdCpuView}, {@link #memfdCpuViewPopulated}, {@link #cLibMemfdCpuView}): every other
 * method's setup throws, naming the cause, where CUDA is not available.
 *
 * <p>The {@code cLib...} methods are the C baseline, timed exactly as the Java methods are: the C client's attach
 * code ({@code native/c}, the functions a protocol import calls) built as a library and called in
 * this JVM ({@link CAttach}), on the same table's fd, on the same thread, one JNR call around the same driver and
 * system calls. What it attached, the C code releases after the shot, outside the timing. So "Java within 1.1x of
 * C" compares the two attaches and nothing else. {@link #cRoundTrip} is timed on its own: one request/answer over a
 * Unix socket with the C client as a separate process ({@link CPeer}), which the earlier, cross-process C baseline
 * included in every C shot.
 */
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 1)
@Measurement(iterations = 5)
@Fork(1)
public class AttachBench {
    /** Memfd 4 KiB: mmap PROT_READ, nothing faulted in (the client's default). No GPU needed. */
    @Benchmark
    public long memfdCpuView(AttachTables.Memfd4k table, AttachTables.Attached attached) {
        return attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), false)).address();
    }

    /** Memfd 4 KiB: mmap PROT_READ with MAP_POPULATE (every page table entry made). No GPU needed. */
    @Benchmark
    public long memfdCpuViewPopulated(AttachTables.Memfd4k table, AttachTables.Attached attached) {
        return attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), true)).address();
    }

    /** Memfd 4 KiB: mmap PROT_READ and cuMemHostRegister (READ_ONLY, DEVICEMAP, PORTABLE). */
    @Benchmark
    public long memfdRegister(AttachTables.Memfd4k table, AttachTables.AttachedGpu attached) {
        Mapping m = attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), false));
        return attached.keep(HostRegistration.register(m.address(), table.region.size(), 0, true)).devicePointer();
    }

    /** Memfd of 2 MiB hugetlb pages: mmap PROT_READ and cuMemHostRegister. */
    @Benchmark
    public long memfdHugetlbRegister(AttachTables.MemfdHuge table, AttachTables.AttachedGpu attached) {
        Mapping m = attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), false));
        return attached.keep(HostRegistration.register(m.address(), table.region.size(), 0, true)).devicePointer();
    }

    /** cuda-vmm: import the HOST_NUMA allocation's fd, map it, GPU read access. */
    @Benchmark
    public long vmmGpu(AttachTables.HostNuma table, AttachTables.AttachedGpu attached) {
        return attached.keep(VmmImport.attach(List.of(table.fd()), List.of(table.size()), 0, Access.READ_ONLY)).base(0);
    }

    /** cuda-vmm: the same plus CPU (HOST_NUMA) access at the same addresses. */
    @Benchmark
    public long vmmGpuCpu(AttachTables.HostNuma table, AttachTables.AttachedGpu attached) {
        return attached.keep(VmmImport.attach(List.of(table.fd()), List.of(table.size()), 0,
                Access.READ_ONLY.withCpuView())).base(0);
    }

    /** C baseline of {@link #memfdCpuView}, in this process: mmap PROT_READ, MAP_SHARED. No GPU needed. */
    @Benchmark
    public long cLibMemfdCpuView(AttachTables.Memfd4k table, AttachTables.CLib c) {
        return c.attach(RegionKind.MEMFD, table.region.fd(), table.region.size(), -1, 0);
    }

    /** C baseline of {@link #memfdRegister}, in this process: mmap, cuMemHostRegister_v2, cuMemHostGetDevicePointer_v2. */
    @Benchmark
    public long cLibMemfdRegister(AttachTables.Memfd4k table, AttachTables.CLibGpu c) {
        return c.attach(RegionKind.MEMFD, table.region.fd(), table.region.size(), -1, CAttach.FLAG_REGISTER);
    }

    /** C baseline of {@link #memfdHugetlbRegister}, in this process: the calls of {@link #cLibMemfdRegister}. */
    @Benchmark
    public long cLibMemfdHugetlbRegister(AttachTables.MemfdHuge table, AttachTables.CLibGpu c) {
        return c.attach(RegionKind.MEMFD_HUGETLB, table.region.fd(), table.region.size(), -1, CAttach.FLAG_REGISTER);
    }

    /**
     * C baseline of {@link #vmmGpu}, in this process: cuMemImportFromShareableHandle, cuMemAddressReserve, cuMemMap,
     * cuMemSetAccess (GPU, read).
     */
    @Benchmark
    public long cLibVmmGpu(AttachTables.HostNuma table, AttachTables.CLibGpu c) {
        return c.attach(RegionKind.VMM_HOST, table.fd(), table.size(), table.node(), 0);
    }

    /** C baseline of {@link #vmmGpuCpu}, in this process: the calls of {@link #cLibVmmGpu}, then cuMemSetAccess (HOST_NUMA). */
    @Benchmark
    public long cLibVmmGpuCpu(AttachTables.HostNuma table, AttachTables.CLibGpu c) {
        return c.attach(RegionKind.VMM_HOST, table.fd(), table.size(), table.node(), CAttach.FLAG_CPU_VIEW);
    }

    /**
     * One request/answer with the C client in a separate process, nothing attached: what each C shot of the earlier,
     * cross-process baseline ({@code engram-attach --bench-peer}) paid on top of its attach. Paired with nothing.
     */
    @Benchmark
    public String cRoundTrip(AttachTables.Peer peer) {
        return peer.ping();
    }
}
