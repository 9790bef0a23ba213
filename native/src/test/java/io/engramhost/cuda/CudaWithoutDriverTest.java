package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import org.junit.jupiter.api.Test;

/** On a machine without a usable driver (CI, the build machine): a cause, and clear errors. */
class CudaWithoutDriverTest {
    @Test
    void shouldReportACauseAndFailEveryCallClearly() {
        assumeFalse(Cuda.available(), "this machine has a working CUDA driver and GPU; the no-driver path is not seen here");
        String cause = Cuda.unavailabilityCause();
        assertNotNull(cause);
        assertFalse(cause.isBlank());
        assertTrue(cause.contains(Cuda.LIBRARY) || cause.startsWith("cuInit") || cause.contains("no CUDA device"), cause);

        CudaUnavailableException e = assertThrows(CudaUnavailableException.class, Cuda::ensureAvailable);
        assertTrue(e.getMessage().endsWith(cause), e.getMessage());
        assertThrows(CudaUnavailableException.class, () -> Cuda.device(0));
        assertThrows(CudaUnavailableException.class, () -> Cuda.useDevice(0));
        assertThrows(CudaUnavailableException.class, () -> DeviceBuffer.allocate(1 << 20, 0, "x"));
        assertThrows(CudaUnavailableException.class, () -> HostRegistration.register(1L << 30, 4096, 0, true));
        assertThrows(CudaUnavailableException.class, () -> GpuKernels.load(0));
        assertFalse(Cuda.available(), "asking again gives the same answer");
        assertTrue(GpuKernels.ptx().length > 0, "the PTX ships in the jar even where it cannot load");
    }
}
