package io.engramhost.memfd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.numa.Meminfo;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.ProcessProbe;
import io.engramhost.os.internal.LibCHolder;
import io.engramhost.testing.NoLeaks;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

@NoLeaks
class MemfdRegionTest {
    private static final jnr.ffi.Pointer MEM = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);
    private static final long PAGE = Posix.pageSize();

    @Test
    void shouldServeOnlyReadOnlyMappingsOnceSealed() {
        int fdsBefore = ProcessProbe.countOpenFds();
        AtomicBoolean hookRan = new AtomicBoolean();
        try (MemfdRegion region = MemfdRegion.create("engram.test", 2 * PAGE, PageKind.SMALL, m -> hookRan.set(true))) {
            assertTrue(hookRan.get(), "the before-touch hook runs on the fresh mapping");
            MEM.putLong(region.writable().address() + PAGE, 0x0123456789abcdefL);
            region.seal();
            assertEquals(MemfdRegion.SEALS, Posix.getSeals(region.fd()) & MemfdRegion.SEALS);
            assertTrue((Posix.getSeals(region.fd()) & Posix.F_SEAL_SEAL) != 0, "SEAL: the seals are final");
            NativeException reseal = assertThrows(NativeException.class,
                    () -> Posix.addSeals(region.fd(), Posix.F_SEAL_WRITE));
            assertEquals("EPERM", reseal.errnoName(), "no seal can be added once SEAL is set");
            assertThrows(IllegalStateException.class, region::writable);
            try (Mapping ro = ReadOnlyMapping.map(region.fd(), 2 * PAGE, true)) {
                assertEquals(0x0123456789abcdefL, MEM.getLong(ro.address() + PAGE));
            }
            NativeException write = assertThrows(NativeException.class,
                    () -> Posix.mmap(2 * PAGE, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, region.fd(), 0));
            assertEquals("EPERM", write.errnoName());
            NativeException shrink = assertThrows(NativeException.class, () -> Posix.ftruncate(region.fd(), PAGE));
            assertEquals("EPERM", shrink.errnoName());
        }
        assertEquals(fdsBefore, ProcessProbe.countOpenFds(), "region closed its memfd");
    }

    @Test
    void shouldRejectSizesThatAreNotWholePages() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MemfdRegion.create("odd", 5000, PageKind.SMALL, null));
        assertEquals("memfd odd: size 5000 is not a positive multiple of " + PAGE, e.getMessage());
        assertEquals(PAGE, PageKind.SMALL.pageSize(), "small pages are the system's base pages");
        assertEquals(3 * PAGE, PageKind.SMALL.roundUp(2 * PAGE + 1));
    }

    @Test
    void shouldSayHugePagesAreMissingWhenNoneAreReserved() throws Exception {
        Path pool = Path.of("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
        Assumptions.assumeTrue(Files.exists(pool), "this kernel offers no 2 MiB huge pages (no " + pool + ")");
        long free = Long.parseLong(Files.readString(pool).trim());
        Assumptions.assumeTrue(free < 2, free + " free 2 MiB huge pages here: the memfd would fit");
        int fdsBefore = ProcessProbe.countOpenFds();
        NativeException e = assertThrows(NativeException.class,
                () -> MemfdRegion.create("huge", 4L << 20, PageKind.HUGE_2M, null));
        String reserve = Meminfo.systemDefaultHugePageSize() == 2L << 20 ? "sysctl vm.nr_hugepages=N"
                : "echo N > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
        assertTrue(e.getMessage().endsWith("not enough 2 MiB huge pages reserved: this memfd needs 2; reserve them with "
                + reserve), e.getMessage());
        assertEquals(fdsBefore, ProcessProbe.countOpenFds(), "the failed region left no fd behind");
    }

    @Test
    void fdIsClosedWhenTheHookFails() {
        int before = Fd.openCount();
        assertThrows(IllegalStateException.class, () -> MemfdRegion.create("hook", PAGE, PageKind.SMALL, m -> {
            throw new IllegalStateException("policy refused");
        }));
        assertEquals(before, Fd.openCount());
    }
}
