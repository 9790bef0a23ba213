package io.engramhost.vmm;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.engramhost.cuda.CudaDevice;
import org.junit.jupiter.api.Test;

class VmmSupportTest {
    private static CudaDevice device(boolean vmm, boolean posixFd, boolean hostNumaVmm) {
        return new CudaDevice(0, "Test GPU", "0000:1b:00.0", "GPU-00000000-0000-0000-0000-000000000000", 0, "9.0",
                1L << 30, 1, vmm, posixFd, hostNumaVmm, true);
    }

    @Test
    void shouldNameTheMissingCapabilityAndPointToMemfd() {
        VmmUnsupportedException e = assertThrows(VmmUnsupportedException.class,
                () -> VmmSupport.check(device(true, true, false)));
        assertEquals("GPU 0 (Test GPU, 0000:1b:00.0) cannot hold cuda-vmm host tables: it lacks HOST_NUMA virtual memory"
                + " management (CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)."
                + " Use --backend memfd instead.", e.getMessage());
    }

    @Test
    void shouldListEveryMissingCapability() {
        assertEquals(3, VmmSupport.missingForHostTables(device(false, false, false)).size());
        assertEquals(2, VmmSupport.missingForDeviceTables(device(false, false, false)).size());
        assertDoesNotThrow(() -> VmmSupport.checkDevice(device(true, true, false)), "device tables need no HOST_NUMA");
        assertDoesNotThrow(() -> VmmSupport.check(device(true, true, true)));
        VmmUnsupportedException e = assertThrows(VmmUnsupportedException.class,
                () -> VmmSupport.checkDevice(device(true, false, true)));
        assertEquals("GPU 0 (Test GPU, 0000:1b:00.0) cannot hold cuda-vmm device tables: it lacks POSIX fd handles"
                + " (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0). Use --backend memfd instead.",
                e.getMessage());
    }
}
