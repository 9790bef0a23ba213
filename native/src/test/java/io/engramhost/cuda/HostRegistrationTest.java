package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import org.junit.jupiter.api.Test;

/** The memfd path: a PROT_READ mapping registered read-only and read by a kernel. */
@GpuTest
@NoLeaks
class HostRegistrationTest {
    private static final long LENGTH = (48L << 20) + 12345;

    @Test
    void shouldReadAReadOnlyMemfdMappingOnTheGpuInChunks() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        assumeTrue(Cuda.device(0).readOnlyHostRegister(), "GPU 0 lacks READ_ONLY_HOST_REGISTER_SUPPORTED");
        try (Fd memfd = Posix.memfdCreate("registration test", Posix.MFD_ALLOW_SEALING)) {
            Posix.ftruncate(memfd, LENGTH);
            try (Mapping rw = Posix.mmap(LENGTH, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, memfd, 0)) {
                Patterns.fill(rw.address(), LENGTH, 42);
            }
            Posix.addSeals(memfd, Posix.F_SEAL_WRITE | Posix.F_SEAL_GROW | Posix.F_SEAL_SHRINK);
            try (Mapping ro = Posix.mmap(LENGTH, Posix.PROT_READ, Posix.MAP_SHARED, memfd, 0);
                    GpuKernels kernels = GpuKernels.load(0)) {
                long expected = GpuChecksum.cpu(ro.address(), LENGTH);
                try (HostRegistration reg = HostRegistration.register(ro.address(), LENGTH, 0, true, 16L << 20)) {
                    assertEquals(4, reg.chunkCount());
                    assertEquals(expected, kernels.checksum(reg.devicePointer(), LENGTH));
                    reg.close(); // closed twice (here and by try): the second close must do nothing
                }
                try (HostRegistration whole = HostRegistration.register(ro.address(), LENGTH, 0, true)) {
                    assertEquals(1, whole.chunkCount());
                    assertEquals(expected, kernels.checksum(whole.devicePointer(), LENGTH), "registers again after close");
                }
            }
        }
    }

    @Test
    void shouldRefuseAReadOnlyMappingRegisteredWritable() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        try (Fd memfd = Posix.memfdCreate("registration test", 0)) {
            Posix.ftruncate(memfd, 1 << 20);
            try (Mapping ro = Posix.mmap(1 << 20, Posix.PROT_READ, Posix.MAP_SHARED, memfd, 0)) {
                CudaException e = assertThrows(CudaException.class, () -> HostRegistration.register(ro.address(), 1 << 20, 0, false));
                assertTrue(e.getMessage().startsWith("cuMemHostRegister(1.0 MiB at +0 of 1.0 MiB, DEVICEMAP|PORTABLE) failed: "),
                        e.getMessage());
            }
        }
    }
}
