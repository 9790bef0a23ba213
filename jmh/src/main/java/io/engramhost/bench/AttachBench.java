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
 * What a restarting engine pays to get a view of one resident table of {@code tableMiB} (GPU machines
 * only: every state's setup throws, naming the cause, where CUDA is not available). The table is created
 * once per trial by the daemon-side code; each single shot attaches it as a client does, and the view is
 * released after the shot, outside the timing. Paths: a memfd of 4 KiB pages mapped read-only for the
 * CPU (lazily, or prefaulted), the same registered for the GPU (cuMemHostRegister READ_ONLY), a hugetlb
 * memfd registered, and a cuda-vmm HOST_NUMA allocation imported with GPU access, or GPU and CPU access.
 *
 * <p>The {@code c...} methods are the baseline: the same table's fd, sent to the C client
 * ({@code engram-attach --bench-peer}, see {@link CPeer}), attached there with the same driver calls. Their
 * time includes one request/answer over a Unix socket, which {@link #cRoundTrip} measures alone.
 */
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 1)
@Measurement(iterations = 5)
@Fork(1)
public class AttachBench {
    /** Memfd 4 KiB: mmap PROT_READ, nothing faulted in (the client's default). */
    @Benchmark
    public long memfdCpuView(AttachTables.Memfd4k table, AttachTables.Attached attached) {
        return attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), false)).address();
    }

    /** Memfd 4 KiB: mmap PROT_READ with MAP_POPULATE (every page table entry made). */
    @Benchmark
    public long memfdCpuViewPopulated(AttachTables.Memfd4k table, AttachTables.Attached attached) {
        return attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), true)).address();
    }

    /** Memfd 4 KiB: mmap PROT_READ and cuMemHostRegister (READ_ONLY, DEVICEMAP, PORTABLE). */
    @Benchmark
    public long memfdRegister(AttachTables.Memfd4k table, AttachTables.Attached attached) {
        Mapping m = attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), false));
        return attached.keep(HostRegistration.register(m.address(), table.region.size(), 0, true)).devicePointer();
    }

    /** Memfd of 2 MiB hugetlb pages: mmap PROT_READ and cuMemHostRegister. */
    @Benchmark
    public long memfdHugetlbRegister(AttachTables.MemfdHuge table, AttachTables.Attached attached) {
        Mapping m = attached.keep(ReadOnlyMapping.map(table.region.fd(), table.region.size(), false));
        return attached.keep(HostRegistration.register(m.address(), table.region.size(), 0, true)).devicePointer();
    }

    /** cuda-vmm: import the HOST_NUMA allocation's fd, map it, GPU read access. */
    @Benchmark
    public long vmmGpu(AttachTables.HostNuma table, AttachTables.Attached attached) {
        return attached.keep(VmmImport.attach(List.of(table.fd()), List.of(table.size()), 0, Access.READ_ONLY)).base(0);
    }

    /** cuda-vmm: the same plus CPU (HOST_NUMA) access at the same addresses. */
    @Benchmark
    public long vmmGpuCpu(AttachTables.HostNuma table, AttachTables.Attached attached) {
        return attached.keep(VmmImport.attach(List.of(table.fd()), List.of(table.size()), 0,
                Access.READ_ONLY.withCpuView())).base(0);
    }

    /** C baseline of {@link #memfdCpuView}. */
    @Benchmark
    public String cMemfdCpuView(AttachTables.Memfd4k table, AttachTables.C c) {
        return c.attach(RegionKind.MEMFD, table.region.fd(), table.region.size(), -1, 0);
    }

    /** C baseline of {@link #memfdRegister}. */
    @Benchmark
    public String cMemfdRegister(AttachTables.Memfd4k table, AttachTables.C c) {
        return c.attach(RegionKind.MEMFD, table.region.fd(), table.region.size(), -1,
                CPeer.FLAG_REGISTER);
    }

    /** C baseline of {@link #memfdHugetlbRegister}. */
    @Benchmark
    public String cMemfdHugetlbRegister(AttachTables.MemfdHuge table, AttachTables.C c) {
        return c.attach(RegionKind.MEMFD_HUGETLB, table.region.fd(), table.region.size(), -1,
                CPeer.FLAG_REGISTER);
    }

    /** C baseline of {@link #vmmGpu}. */
    @Benchmark
    public String cVmmGpu(AttachTables.HostNuma table, AttachTables.C c) {
        return c.attach(RegionKind.VMM_HOST, table.fd(), table.size(), table.node(), 0);
    }

    /** C baseline of {@link #vmmGpuCpu}. */
    @Benchmark
    public String cVmmGpuCpu(AttachTables.HostNuma table, AttachTables.C c) {
        return c.attach(RegionKind.VMM_HOST, table.fd(), table.size(), table.node(),
                CPeer.FLAG_CPU_VIEW);
    }

    /** The request/answer with the C peer that every {@code c...} shot includes, with nothing attached. */
    @Benchmark
    public String cRoundTrip(AttachTables.C c) {
        return c.ping();
    }
}
