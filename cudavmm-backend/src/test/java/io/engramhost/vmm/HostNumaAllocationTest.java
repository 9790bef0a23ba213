package io.engramhost.vmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaResources;
import io.engramhost.cuda.GpuChecksum;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Daemon side and same-process attach of HOST_NUMA and device allocations. */
@GpuTest
@NoLeaks
class HostNumaAllocationTest {
    private int node;

    @BeforeEach
    void needsHostNumaVmm() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        assumeTrue(VmmSupport.missingForHostTables(Cuda.device(0)).isEmpty(),
                "GPU 0 lacks " + VmmSupport.missingForHostTables(Cuda.device(0)));
        node = Math.max(0, Cuda.device(0).hostNumaId());
    }

    @Test
    void shouldCreateRoundedFillWithPreadAndExportFreshFds() {
        long requested = (10L << 20) + 1;
        try (HostNumaAllocation a = HostNumaAllocation.create(requested, node, "t1");
                Fd file = TestMemory.memfd(requested, 9);
                Mapping source = Posix.mmap(requested, Posix.PROT_READ, Posix.MAP_SHARED, file, 0)) {
            assertEquals(12L << 20, a.size(), "rounded up to the 2 MiB granularity");
            assertEquals(requested, a.requestedBytes());
            Posix.preadFully(file, a.hostAddress(), requested, 0);
            assertEquals(GpuChecksum.cpu(source.address(), requested), GpuChecksum.cpu(a.hostAddress(), requested));
            try (Fd e1 = a.exportFd(); Fd e2 = a.exportFd()) {
                assertNotEquals(e1.get(), e2.get(), "each export is a fresh fd");
                assertTrue(Posix.isCloexec(e1));
            }
            System.out.println("create " + a.size() + " B on node " + node + ": " + a.createNanos() / 1e6 + " ms");
        }
        try (HostNumaAllocation again = HostNumaAllocation.create(1, node, "t2")) {
            assertEquals(2L << 20, again.size(), "a second allocation after close");
        }
    }

    @Test
    void shouldShareWritesBetweenTheDaemonAndAReadWriteAttach() {
        try (HostNumaAllocation a = HostNumaAllocation.create(4L << 20, node, "t"); Fd fd = a.exportFd();
                VmmImport view = VmmImport.attach(List.of(fd), List.of(a.size()), 0, Access.READ_WRITE)) {
            TestMemory.fill(a.hostAddress(), a.size(), 5);
            Cuda.memset(0, view.base(0) + 4096, (byte) 0x7e, 8192);
            assertEquals(0x7e7e7e7e7e7e7e7eL, TestMemory.MEMORY.getLong(a.hostAddress() + 4096 + 8184),
                    "the daemon sees the engine's GPU write");
            assertEquals(0, view.timings().cpuAccessNanos(), "no CPU view asked, none paid for");
        }
    }

    @Test
    void shouldRefuseACpuViewOfDeviceMemoryAndReleaseWhatItBuilt() {
        try (DeviceAllocation d = DeviceAllocation.create(2L << 20, 0, "d"); Fd fd = d.exportFd()) {
            int before = CudaResources.live();
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> VmmImport.attach(List.of(fd), List.of(d.size()), 0, Access.READ_ONLY.withCpuView()));
            assertEquals("attach: fd 0 is memory on GPU 0, which has no CPU view; attach it without cpuView", e.getMessage());
            assertEquals(before, CudaResources.live(), "the imported handle was released");
        }
    }

    @Test
    void shouldAttachADeviceAllocationInTheSameProcess() {
        long size = (6L << 20) + 8;
        try (Mapping staging = Posix.mmapAnonymous(size, "staging");
                DeviceAllocation d = DeviceAllocation.create(size, 0, "d"); Fd fd = d.exportFd();
                GpuKernels k = GpuKernels.load(0)) {
            TestMemory.fill(staging.address(), size, 11);
            d.copyFromHost(staging.address(), 0, size);
            assertEquals(8L << 20, d.size());
            try (VmmImport v = VmmImport.attach(List.of(fd), List.of(d.size()), 0, Access.READ_ONLY)) {
                assertEquals(GpuChecksum.cpu(staging.address(), size), k.checksum(v.base(0), size));
                assertEquals(k.checksum(d.devicePointer(), d.size()), k.checksum(v.base(0), v.size(0)));
            }
        }
    }
}
