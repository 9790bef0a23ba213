package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import org.junit.jupiter.api.Test;

/** cuMemHostAlloc memory: the arguments refused before the driver is asked, and (on a GPU) what a kernel reads. */
@NoLeaks
class PinnedHostBufferTest {
    @Test
    void shouldRefuseASizeOrFlagsTheDriverWouldRefuseBeforeAskingIt() {
        IllegalArgumentException size = assertThrows(IllegalArgumentException.class,
                () -> PinnedHostBuffer.allocate(0, 0, "table"));
        assertEquals("cuMemHostAlloc(table): size must be positive, was 0", size.getMessage());
        assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.allocate(-4096, 0, "table"));
        IllegalArgumentException flags = assertThrows(IllegalArgumentException.class,
                () -> PinnedHostBuffer.allocate(4096, 0, 0x8, "table"));
        assertEquals("cuMemHostAlloc(table): flags 0x8 name bits other than PORTABLE 0x1, DEVICEMAP 0x2 and"
                + " WRITECOMBINED 0x4", flags.getMessage());
    }

    @Test
    void shouldNameTheFlagsAsTheMessagesDo() {
        assertEquals("DEVICEMAP|PORTABLE",
                PinnedHostBuffer.flagNames(PinnedHostBuffer.FLAG_DEVICEMAP | PinnedHostBuffer.FLAG_PORTABLE));
        assertEquals("WRITECOMBINED", PinnedHostBuffer.flagNames(PinnedHostBuffer.FLAG_WRITECOMBINED));
        assertEquals("no flags", PinnedHostBuffer.flagNames(0));
    }

    @Test
    @GpuTest
    void shouldGiveTheGpuTheBytesTheCpuWroteAndFreeOnce() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        long size = (16L << 20) + 12345;
        int live = CudaResources.live();
        try (GpuKernels kernels = GpuKernels.load(0)) {
            int withKernels = CudaResources.live(); // the module and its scratch buffer
            PinnedHostBuffer buffer = PinnedHostBuffer.allocate(size, 0, "pinned test");
            try {
                assertEquals(withKernels + 1, CudaResources.live(), "the buffer is one owner more");
                assertEquals(size, buffer.size());
                assertTrue(buffer.unifiedAddress(), "64-bit process: the GPU reads it at its CPU address");
                Patterns.fill(buffer.hostAddress(), size, 7);
                assertEquals(GpuChecksum.cpu(buffer.hostAddress(), size), kernels.checksum(buffer.devicePointer(), size));
                assertEquals("PinnedHostBuffer[pinned test, " + io.engramhost.util.Bytes.format(size)
                        + ", DEVICEMAP|PORTABLE]", buffer.toString());
            } finally {
                buffer.close();
                buffer.close(); // the second close does nothing
            }
            assertFalse(buffer.isOpen());
            assertEquals("pinned host buffer pinned test is closed",
                    assertThrows(IllegalStateException.class, buffer::devicePointer).getMessage());
            try (PinnedHostBuffer wc = PinnedHostBuffer.allocate(1 << 20, 0, PinnedHostBuffer.FLAG_WRITECOMBINED, "wc")) {
                assertEquals(PinnedHostBuffer.FLAG_WRITECOMBINED, wc.flags());
                assertTrue(wc.devicePointer() != 0);
            }
            assertEquals(withKernels, CudaResources.live(), "the buffers closed");
        }
        assertEquals(live, CudaResources.live(), "the kernels closed");
    }
}
