package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.internal.LibCHolder;
import io.engramhost.testing.NoLeaks;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

@NoLeaks
class PosixTest {
    private static final jnr.ffi.Pointer MEM = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);

    @Test
    void shouldPassEverySixthArgumentOfMmap() {
        long page = Posix.pageSize();
        try (Fd fd = Posix.memfdCreate("six-args", Posix.MFD_ALLOW_SEALING)) {
            Posix.ftruncate(fd, 4 * page);
            try (Mapping w = Posix.mmap(4 * page, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
                for (int p = 0; p < 4; p++) {
                    MEM.putLong(w.address() + p * page, 0x1111L * (p + 1));
                }
            }
            // Find a free hole, then map exactly there: addr, len, prot, flags, fd and offset all matter.
            long hint;
            try (Mapping probe = Posix.mmapAnonymous(16 * page, "probe")) {
                hint = probe.address() + 8 * page;
            }
            try (Mapping m = Posix.mmapAt(hint, 2 * page, Posix.PROT_READ, Posix.MAP_SHARED | Posix.MAP_FIXED_NOREPLACE,
                    fd, 2 * page)) {
                assertEquals(hint, m.address(), "addr (1st) and MAP_FIXED_NOREPLACE (4th) honoured");
                assertEquals(0x3333L, MEM.getLong(m.address()), "offset (6th) selects page 2 of fd (5th)");
                assertEquals(0x4444L, MEM.getLong(m.address() + page), "length (2nd) covers two pages");
                String maps = readMaps(m.address());
                assertTrue(maps.contains(" r--s "), "prot (3rd) is read-only shared: " + maps);
            }
        }
    }

    private static String readMaps(long address) {
        try {
            String hex = Long.toHexString(address);
            return Files.readAllLines(Path.of("/proc/self/maps")).stream().filter(l -> l.startsWith(hex + "-"))
                    .findFirst().orElse("(not mapped)");
        } catch (java.io.IOException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void shouldSealAgainstWritesGrowAndShrink() {
        try (Fd fd = Posix.memfdCreate("sealed", Posix.MFD_ALLOW_SEALING)) {
            Posix.ftruncate(fd, 8192);
            try (Mapping owner = Posix.mmap(8192, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
                Posix.addSeals(fd, Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW | Posix.F_SEAL_FUTURE_WRITE);
                MEM.putLong(owner.address(), 42L); // the owner's existing mapping stays writable
                NativeException e = assertThrows(NativeException.class,
                        () -> Posix.mmap(8192, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0));
                assertEquals("EPERM", e.errnoName());
                assertTrue(e.getMessage().startsWith("mmap(memfd sealed"), e.getMessage());
                assertThrows(NativeException.class, () -> Posix.ftruncate(fd, 4096));
                assertThrows(NativeException.class, () -> Posix.ftruncate(fd, 16384));
                try (Mapping ro = Posix.mmap(8192, Posix.PROT_READ, Posix.MAP_SHARED, fd, 0)) {
                    assertEquals(42L, MEM.getLong(ro.address()));
                }
            }
        }
    }

    @Test
    void shouldNameCallAndErrnoOnFailure() {
        NativeException e = assertThrows(NativeException.class,
                () -> Posix.open(Path.of("/nonexistent/engram"), Posix.O_RDONLY, 0));
        assertEquals("open(/nonexistent/engram) failed: ENOENT (No such file or directory)", e.getMessage());
        NativeException seal = assertThrows(NativeException.class, () -> {
            try (Fd fd = Posix.memfdCreate("unsealable", 0)) {
                Posix.addSeals(fd, Posix.F_SEAL_GROW);
            }
        });
        assertTrue(seal.getMessage().startsWith("fcntl(memfd unsealable, F_ADD_SEALS, 0x4) failed: EPERM"),
                seal.getMessage());
    }

    @Test
    void shouldCloseFdOnceAndRefuseUseAfterClose() {
        int before = ProcessProbe.countOpenFds();
        Fd fd = Posix.memfdCreate("twice", 0);
        assertTrue(Posix.isCloexec(fd));
        assertEquals(before + 1, ProcessProbe.countOpenFds());
        BorrowedFd view = fd.borrow();
        assertEquals(fd.get(), view.get());
        fd.close();
        fd.close();
        assertFalse(fd.isOpen());
        assertEquals(before, ProcessProbe.countOpenFds());
        assertThrows(IllegalStateException.class, fd::get);
        assertEquals("fd of memfd twice is closed", assertThrows(IllegalStateException.class, view::get).getMessage(),
                "a borrowed view is refused once its owner closed the fd");
    }

    @Test
    void shouldReadFileFullyWithPread(@TempDir Path dir) throws Exception {
        byte[] data = new byte[3 * 4096 + 17];
        for (int i = 0; i < data.length; i++) {
            data[i] = (byte) (i * 31);
        }
        Path f = dir.resolve("data.bin");
        Files.write(f, data);
        try (Fd fd = Posix.open(f, Posix.O_RDONLY, 0); Mapping dst = Posix.mmapAnonymous(16384, "dst")) {
            assertEquals(data.length, Posix.size(fd));
            Posix.preadFully(fd, dst.address(), data.length - 5, 5);
            byte[] back = new byte[data.length - 5];
            MEM.get(dst.address(), back, 0, back.length);
            assertArrayEquals(java.util.Arrays.copyOfRange(data, 5, data.length), back);
            NativeException eof = assertThrows(NativeException.class,
                    () -> Posix.preadFully(fd, dst.address(), 100, data.length - 10));
            assertTrue(eof.getMessage().contains("unexpected end of file"), eof.getMessage());
        }
    }

    @Test
    void shouldTakeExclusiveLockOnce(@TempDir Path dir) {
        Path lock = dir.resolve("lock");
        try (Fd a = Posix.open(lock, Posix.O_RDWR | Posix.O_CREAT, 0600);
                Fd b = Posix.open(lock, Posix.O_RDWR, 0)) {
            assertTrue(Posix.flock(a, Posix.LOCK_EX | Posix.LOCK_NB));
            assertFalse(Posix.flock(b, Posix.LOCK_EX | Posix.LOCK_NB));
            Posix.flock(a, Posix.LOCK_UN);
            assertTrue(Posix.flock(b, Posix.LOCK_EX | Posix.LOCK_NB));
        }
    }

    @Test
    void shouldSeeProcessExitThroughPidfd() throws Exception {
        Process p = new ProcessBuilder("sleep", "0.2").start();
        try (Fd pidfd = Posix.pidfdOpen((int) p.pid())) {
            assertEquals(0, Posix.poll(pidfd, Posix.POLLIN, 0), "alive");
            assertTrue(Posix.poll(pidfd, Posix.POLLIN, 5000) != 0, "readable once exited");
        }
        p.waitFor();
    }

    @Test
    void shouldRaiseNoFileLimit() {
        assertTrue(Posix.raiseNoFileLimit() >= 1024);
    }

    @Test
    void shouldDropAFilesCleanPagesFromThePageCache(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("cached.bin");
        long page = Posix.pageSize();
        byte[] data = new byte[(int) (64 * page)];
        java.util.Arrays.fill(data, (byte) 7);
        try (java.nio.channels.FileChannel c = java.nio.channels.FileChannel.open(file,
                java.nio.file.StandardOpenOption.CREATE_NEW, java.nio.file.StandardOpenOption.WRITE)) {
            c.write(java.nio.ByteBuffer.wrap(data));
            c.force(true); // dirty pages stay in the cache whatever the advice
        }
        String fs = Files.getFileStore(dir).type();
        org.junit.jupiter.api.Assumptions.assumeFalse(fs.equals("tmpfs"),
                "the temporary directory is on tmpfs, whose pages are its storage: nothing can be dropped");
        try (Fd fd = Posix.open(file, Posix.O_RDONLY, 0)) {
            Posix.preadFully(fd, scratch(data.length), data.length, 0);
            assertEquals(64, PageCache.residentPages(fd, data.length), "just read: every page cached");
            PageCache.drop(fd);
            assertEquals(0, PageCache.residentPages(fd, data.length), "dropped (" + fs + ")");
        }
    }

    @Test
    void shouldNameTheAdviceAndTheErrnoWhenAPageCacheCannotBeDropped() {
        BorrowedFd notOpen = BorrowedFd.of(Integer.MAX_VALUE, "fd that is not open"); // no process has that many fds
        NativeException e = assertThrows(NativeException.class, () -> PageCache.drop(notOpen));
        assertEquals("EBADF", e.errnoName());
        assertTrue(e.getMessage().startsWith(
                "posix_fadvise(fd that is not open, 0, 0, POSIX_FADV_DONTNEED) failed: EBADF"), e.getMessage());
    }

    private static long scratch(int length) {
        return jnr.ffi.Memory.allocateDirect(LibCHolder.RUNTIME, length).address();
    }
}
