package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

@GpuTest
@NoLeaks
class CudaGpuTest {
    @BeforeEach
    void needsGpu() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
    }

    @Test
    void shouldDescribeTheDevice() {
        CudaDevice d = Cuda.device(0);
        System.out.println("driver " + Cuda.driverVersion() + ", " + Cuda.deviceCount() + " device(s); " + d);
        assertTrue(Cuda.driverVersion() >= 12000, "driver " + Cuda.driverVersion());
        assertTrue(!d.name().isBlank() && d.totalMemory() > 0 && d.multiprocessors() > 0, d.toString());
        assertTrue(d.pciBusId().matches("[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]"), d.pciBusId());
        assertTrue(d.uuid().matches("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), d.uuid());
        assertTrue(d.hostNumaId() >= -1, "host NUMA id " + d.hostNumaId());
        assertTrue(d.computeCapability().matches("\\d+\\.\\d+"), d.computeCapability());
        assertThrows(IllegalArgumentException.class, () -> Cuda.device(Cuda.deviceCount()));
    }

    @Test
    void shouldUseThePrimaryContextFromAnyThread() throws Exception {
        long got = CompletableFuture.supplyAsync(() -> {
            try (DeviceBuffer b = DeviceBuffer.allocate(1 << 20, 0, "thread test");
                    Mapping host = Posix.mmapAnonymous(1 << 20, "host copy")) {
                b.fill((byte) 0x5a);
                b.copyToHost(0, host.address(), 1 << 20);
                return Patterns.MEMORY.getLong(host.address() + (1 << 20) - 8);
            }
        }).get(30, TimeUnit.SECONDS);
        assertEquals(0x5a5a5a5a5a5a5a5aL, got);
    }

    @Test
    void shouldNameTheCallAndResultWhenTheDriverRefuses() {
        CudaException e = assertThrows(CudaException.class, () -> DeviceBuffer.allocate(1L << 50, 0, "too big"));
        assertTrue(e.getMessage().startsWith("cuMemAlloc(1.0 PiB on GPU 0, too big) failed: CUDA_ERROR_OUT_OF_MEMORY (2)"),
                e.getMessage());
        long[] info = Cuda.memInfo(0);
        assertTrue(info[0] > 0 && info[0] <= info[1], "free " + info[0] + " of " + info[1]);
    }
}
