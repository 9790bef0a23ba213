package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import java.util.SplittableRandom;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

@GpuTest
@NoLeaks
class GpuKernelsTest {
    @BeforeEach
    void needsGpu() {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
    }

    @Test
    void shouldChecksumLikeTheCpuForEveryTail() {
        long size = (8L << 20) + 13;
        try (Mapping host = Posix.mmapAnonymous(size, "host"); DeviceBuffer buf = DeviceBuffer.allocate(size, 0, "buf");
                GpuKernels k = GpuKernels.load(0)) {
            Patterns.fill(host.address(), size, 3);
            buf.copyFromHost(host.address(), 0, size);
            for (long length : new long[] {0, 1, 7, 8, 9, 4096 + 5, size}) {
                assertEquals(GpuChecksum.cpu(host.address(), length), k.checksum(buf.pointer(), length), "length " + length);
            }
            assertEquals(GpuChecksum.xorWords(host.address(), 8L << 20), k.readSequential(buf.pointer(), 8L << 20));
        }
    }

    @Test
    void shouldGatherRowsLikeTheCpu() {
        for (int rowBytes : new int[] {264, 13}) {
            long rows = 10_000;
            int count = 5_000;
            try (Mapping table = Posix.mmapAnonymous(rows * rowBytes, "table");
                    Mapping ids = Posix.mmapAnonymous(8L * count, "ids");
                    Mapping back = Posix.mmapAnonymous((long) count * rowBytes, "gathered");
                    DeviceBuffer dTable = DeviceBuffer.allocate(rows * rowBytes, 0, "table");
                    DeviceBuffer dIds = DeviceBuffer.allocate(8L * count, 0, "ids");
                    DeviceBuffer dOut = DeviceBuffer.allocate((long) count * rowBytes, 0, "out");
                    GpuKernels k = GpuKernels.load(0)) {
                Patterns.fill(table.address(), rows * rowBytes, rowBytes);
                SplittableRandom random = new SplittableRandom(rowBytes);
                for (int i = 0; i < count; i++) {
                    Patterns.MEMORY.putLong(ids.address() + 8L * i, random.nextLong(rows));
                }
                dTable.copyFromHost(table.address(), 0, rows * rowBytes);
                dIds.copyFromHost(ids.address(), 0, 8L * count);
                k.gather(dTable.pointer(), rows, rowBytes, dIds.pointer(), count, dOut.pointer());
                dOut.copyToHost(0, back.address(), (long) count * rowBytes);
                for (int i = 0; i < count; i++) {
                    long id = Patterns.MEMORY.getLong(ids.address() + 8L * i);
                    for (int b = 0; b < rowBytes; b++) {
                        if (Patterns.MEMORY.getByte(table.address() + id * rowBytes + b)
                                != Patterns.MEMORY.getByte(back.address() + (long) i * rowBytes + b)) {
                            throw new AssertionError("row " + i + " (id " + id + ", " + rowBytes + " B) differs at byte " + b);
                        }
                    }
                }
                Patterns.MEMORY.putLong(ids.address(), rows);
                dIds.copyFromHost(ids.address(), 0, 8);
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> k.gather(dTable.pointer(), rows, rowBytes, dIds.pointer(), count, dOut.pointer()));
                assertTrue(e.getMessage().startsWith("gather: 1 of 5000 row ids are >= the table's 10000 rows"), e.getMessage());
            }
        }
    }
}
