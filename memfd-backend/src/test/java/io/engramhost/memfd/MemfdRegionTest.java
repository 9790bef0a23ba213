package io.engramhost.memfd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.internal.LibCHolder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class MemfdRegionTest {
    private static final jnr.ffi.Pointer MEM = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);

    @Test
    void shouldServeOnlyReadOnlyMappingsOnceSealed() {
        int fdsBefore = Posix.countOpenFds();
        AtomicBoolean hookRan = new AtomicBoolean();
        try (MemfdRegion region = MemfdRegion.create("engram.test", 8192, PageKind.SMALL, m -> hookRan.set(true))) {
            assertTrue(hookRan.get(), "the before-touch hook runs on the fresh mapping");
            MEM.putLong(region.writable().address() + 4096, 0x0123456789abcdefL);
            region.seal();
            assertEquals(MemfdRegion.SEALS, Posix.getSeals(region.fd()) & MemfdRegion.SEALS);
            assertThrows(IllegalStateException.class, region::writable);
            try (Mapping ro = ReadOnlyMapping.map(region.fd(), 8192, true)) {
                assertEquals(0x0123456789abcdefL, MEM.getLong(ro.address() + 4096));
            }
            NativeException write = assertThrows(NativeException.class,
                    () -> Posix.mmap(8192, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, region.fd(), 0));
            assertEquals("EPERM", write.errnoName());
            NativeException shrink = assertThrows(NativeException.class, () -> Posix.ftruncate(region.fd(), 4096));
            assertEquals("EPERM", shrink.errnoName());
        }
        assertEquals(fdsBefore, Posix.countOpenFds(), "region closed its memfd");
    }

    @Test
    void shouldRejectSizesThatAreNotWholePages() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MemfdRegion.create("odd", 5000, PageKind.SMALL, null));
        assertEquals("memfd odd: size 5000 is not a positive multiple of 4096", e.getMessage());
    }

    @Test
    void shouldSayHugePagesAreMissingWhenNoneAreReserved() throws Exception {
        long reserved = Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim());
        Assumptions.assumeTrue(reserved == 0, "vm.nr_hugepages=" + reserved + ": huge pages are reserved here");
        int fdsBefore = Posix.countOpenFds();
        NativeException e = assertThrows(NativeException.class,
                () -> MemfdRegion.create("huge", 4L << 20, PageKind.HUGE_2M, null));
        assertTrue(e.getMessage().contains("not enough 2 MiB huge pages reserved: this memfd needs 2"), e.getMessage());
        assertEquals(fdsBefore, Posix.countOpenFds(), "the failed region left no fd behind");
    }

    @Test
    void fdIsClosedWhenTheHookFails() {
        int before = Fd.openCount();
        assertThrows(IllegalStateException.class, () -> MemfdRegion.create("hook", 4096, PageKind.SMALL, m -> {
            throw new IllegalStateException("policy refused");
        }));
        assertEquals(before, Fd.openCount());
    }
}
