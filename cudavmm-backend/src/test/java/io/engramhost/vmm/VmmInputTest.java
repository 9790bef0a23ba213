package io.engramhost.vmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaUnavailableException;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Bad input and a machine without CUDA: clear errors before any driver call. */
class VmmInputTest {
    @Test
    void shouldRejectMismatchedOrEmptyInputBeforeTouchingCuda() {
        try (Fd a = Posix.memfdCreate("a", 0)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> VmmImport.attach(List.of(a), List.of(1L << 21, 1L << 21), 0, Access.READ_ONLY));
            assertEquals("attach: 1 fds but 2 sizes", e.getMessage());
            e = assertThrows(IllegalArgumentException.class,
                    () -> VmmImport.attach(List.of(a), List.of(0L), 0, Access.READ_ONLY));
            assertEquals("attach: size of fd 0 must be positive, was 0", e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> VmmImport.attach(List.of(), List.of(), 0, Access.READ_ONLY));
            assertEquals("attach: no fds given", e.getMessage());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> HostNumaAllocation.create(1 << 20, -1, "t"));
        assertTrue(e.getMessage().contains("NUMA node must be >= 0, was -1"), e.getMessage());
    }

    @Test
    void shouldDescribeAccessModes() {
        assertEquals("read-only", Access.READ_ONLY.toString());
        assertEquals("read-write with CPU view", Access.READ_WRITE.withCpuView().toString());
        assertFalse(Access.READ_ONLY.gpuWrite());
        assertTrue(Access.READ_ONLY.withCpuView().cpuView());
    }

    @Test
    void shouldFailWithTheCauseWhereThereIsNoCuda() {
        assumeFalse(Cuda.available(), "this machine has a working CUDA driver and GPU; the no-driver path is not seen here");
        CudaUnavailableException e = assertThrows(CudaUnavailableException.class,
                () -> HostNumaAllocation.create(1 << 20, 0, "t"));
        assertTrue(e.getMessage().endsWith(Cuda.unavailabilityCause()), e.getMessage());
        assertThrows(CudaUnavailableException.class, () -> DeviceAllocation.create(1 << 20, 0, "d"));
        try (Fd a = Posix.memfdCreate("a", 0)) {
            assertThrows(CudaUnavailableException.class,
                    () -> VmmImport.attach(List.of(a), List.of(1L << 21), 0, Access.READ_ONLY));
        }
    }
}
