package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The shared owner lifecycle, on real driver resources: counted, closed once, refused after. */
@GpuTest
@NoLeaks
class CudaOwnerTest {
    @BeforeEach
    void needsGpu() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
    }

    @Test
    void shouldReleaseOnceAndRefuseUseAfterClose() {
        int live = CudaResources.live();
        long g = MemHandle.granularity(Location.device(0), false, 0, false);
        DeviceBuffer buffer = DeviceBuffer.allocate(1 << 20, 0, "buf");
        MemHandle handle = MemHandle.create(g, Location.device(0), false, 0, "mem");
        VaRange range = VaRange.reserve(g, 0, 0, "va");
        VaMapping mapping = VaMapping.map(range, 0, handle);
        assertEquals(live + 4, CudaResources.live(), "each owner counted once");

        closeTwice(mapping);
        closeTwice(range);
        closeTwice(handle);
        closeTwice(buffer);
        assertEquals(live, CudaResources.live(), "each owner uncounted once, however often closed");

        assertRefused("mapping of mem is closed", mapping::address);
        assertRefused("VA range of va is closed", range::base);
        assertRefused("allocation handle of mem is closed", handle::raw);
        assertRefused("device buffer buf is closed", buffer::pointer);
        assertTrue(handle.toString().endsWith(", closed]"), handle.toString());
    }

    private static void closeTwice(CudaOwner owner) {
        assertTrue(owner.isOpen());
        owner.close();
        owner.close();
        assertFalse(owner.isOpen());
    }

    private static void assertRefused(String message, Executable use) {
        assertEquals(message, assertThrows(IllegalStateException.class, use).getMessage());
    }
}
