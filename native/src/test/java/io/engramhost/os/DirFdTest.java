package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.testing.NoLeaks;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** DirFd against real files: nothing done through it follows a symlink at the name it is given. */
@NoLeaks
class DirFdTest {
    private static Path victim(Path dir) throws Exception {
        Path v = dir.resolve("victim");
        Files.writeString(v, "precious\n");
        Files.setPosixFilePermissions(v, PosixFilePermissions.fromString("rw-r--r--"));
        return v;
    }

    private static void assertUntouched(Path victim) throws Exception {
        assertEquals("precious\n", Files.readString(victim), "the symlink's target was not written");
        assertEquals("rw-r--r--", PosixFilePermissions.toString(Files.getPosixFilePermissions(victim)),
                "nor its mode changed");
    }

    @Test
    void shouldMatchTheJdksViewOfAFile(@TempDir Path dir) throws Exception {
        Path f = Files.writeString(dir.resolve("f"), "12345");
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString("rw-r-----"));
        int owned = Fd.openCount();
        try (DirFd d = DirFd.open(dir)) {
            FileStat st = d.statAt("f");
            assertTrue(st.isRegular());
            assertEquals(0640, st.mode());
            assertEquals(5, st.size());
            assertEquals(1, st.nlink());
            assertEquals((int) Files.getAttribute(f, "unix:uid"), st.uid());
            assertEquals(((Number) Files.getAttribute(f, "unix:ino")).longValue(), st.ino());
            assertEquals("-rw-r-----", st.modeString());
            assertTrue(d.stat().isDirectory());
            assertNull(d.statAt("absent"));
            assertEquals(dir.toRealPath(), d.realPath());
        }
        assertEquals(owned, Fd.openCount());
    }

    @Test
    void shouldNotFollowASymlinkAnywhere(@TempDir Path dir) throws Exception {
        Path victim = victim(dir);
        Path sub = Files.createDirectory(dir.resolve("sub"));
        for (String n : new String[] {"lock", "tmp", "ready", "sock"}) {
            Files.createSymbolicLink(sub.resolve(n), victim);
        }
        try (DirFd d = DirFd.open(sub)) {
            NativeException loop = assertThrows(NativeException.class,
                    () -> d.openFile("lock", Posix.O_RDWR | Posix.O_CREAT, 0600));
            assertEquals(DirFd.ELOOP, loop.errno());
            assertTrue(loop.getMessage().contains("is a symbolic link, which is not followed"), loop.getMessage());
            NativeException exists = assertThrows(NativeException.class,
                    () -> d.openFile("tmp", DirFd.O_WRONLY | Posix.O_CREAT | DirFd.O_EXCL, 0644));
            assertEquals(Errno.EEXIST, exists.errno());
            assertTrue(d.statAt("ready").isSymlink());
            NativeException chmod = assertThrows(NativeException.class, () -> d.chmodNoFollow("sock", 0600));
            assertEquals(DirFd.ELOOP, chmod.errno());

            assertTrue(d.unlink("tmp"), "unlinkat removes the link itself");
            try (Fd f = d.openFile("tmp", DirFd.O_WRONLY | Posix.O_CREAT | DirFd.O_EXCL, 0644)) {
                DirFd.writeFully(f, "new\n".getBytes(StandardCharsets.US_ASCII), 0);
                DirFd.fsync(f);
            }
            d.rename("tmp", "ready");
            assertFalse(Files.isSymbolicLink(sub.resolve("ready")), "renameat replaced the link");
            assertEquals("new\n", Files.readString(sub.resolve("ready")));
            assertFalse(d.unlink("tmp"), "absent: false");
        }
        assertUntouched(victim);
    }

    @Test
    void shouldRefuseASymlinkedDirectoryButFollowWhenAsked(@TempDir Path dir) throws Exception {
        Path real = Files.createDirectory(dir.resolve("real"));
        Path link = Files.createSymbolicLink(dir.resolve("link"), real);
        NativeException e = assertThrows(NativeException.class, () -> DirFd.open(link));
        assertEquals(DirFd.ELOOP, e.errno());
        try (DirFd d = DirFd.openFollowing(link)) {
            assertEquals(real.toRealPath(), d.realPath());
        }
        try (DirFd d = DirFd.open(dir)) {
            assertEquals(DirFd.ELOOP, assertThrows(NativeException.class, () -> d.openDir("link")).errno());
            try (DirFd r = d.openDir("real"); DirFd up = r.parent()) {
                assertTrue(up.stat().sameFile(d.stat()), ".. of real is dir");
            }
        }
        Files.writeString(dir.resolve("file"), "x");
        assertEquals(DirFd.ENOTDIR, assertThrows(NativeException.class, () -> DirFd.open(dir.resolve("file"))).errno());
    }

    @Test
    void shouldRemoveOnlyAnEmptyDirectoryAndNeverFollowALink(@TempDir Path dir) throws Exception {
        Files.createDirectories(dir.resolve("full/inner"));
        Files.createDirectory(dir.resolve("empty"));
        Files.createDirectory(dir.resolve("target"));
        Files.createSymbolicLink(dir.resolve("link"), dir.resolve("target"));
        try (DirFd d = DirFd.open(dir)) {
            assertFalse(d.rmdir("full"), "ENOTEMPTY: false, nothing removed");
            assertTrue(Files.isDirectory(dir.resolve("full/inner")));
            assertTrue(d.rmdir("empty"));
            assertFalse(Files.exists(dir.resolve("empty")));
            assertFalse(d.rmdir("empty"), "ENOENT: false");
            assertEquals(DirFd.ENOTDIR, assertThrows(NativeException.class, () -> d.rmdir("link")).errno(),
                    "a symlink is not followed");
            assertTrue(Files.isDirectory(dir.resolve("target")));
        }
    }

    @Test
    void shouldCreateDirectoriesOnceAndSetModes(@TempDir Path dir) throws Exception {
        try (DirFd d = DirFd.open(dir)) {
            assertTrue(d.mkdir("new", 0700));
            assertFalse(d.mkdir("new", 0700), "EEXIST: false");
            try (DirFd n = d.openDir("new")) {
                n.chmod(0755);
                assertEquals(0755, n.stat().mode());
                try (Fd f = n.openFile("f", Posix.O_RDWR | Posix.O_CREAT, 0644)) {
                    assertEquals(0, DirFd.readUpTo(f, 16).length, "a new file is empty");
                }
                FileStat before = n.chmodNoFollow("f", 0600);
                assertEquals(0644 & ~umask(), before.mode());
                assertEquals("rw-------", PosixFilePermissions.toString(
                        Files.getPosixFilePermissions(dir.resolve("new/f"), LinkOption.NOFOLLOW_LINKS)));
            }
        }
        assertThrows(IllegalArgumentException.class, () -> {
            try (DirFd d = DirFd.open(dir)) {
                d.openFile("../escape", Posix.O_RDWR | Posix.O_CREAT, 0600);
            }
        });
    }

    @Test
    void shouldReadWhatWasWritten(@TempDir Path dir) throws Exception {
        try (DirFd d = DirFd.open(dir); Fd f = d.openFile("pid", Posix.O_RDWR | Posix.O_CREAT, 0600)) {
            DirFd.writeFully(f, "12345\n".getBytes(StandardCharsets.US_ASCII), 0);
            assertArrayEquals("123".getBytes(StandardCharsets.US_ASCII), DirFd.readUpTo(f, 3));
            assertArrayEquals("12345\n".getBytes(StandardCharsets.US_ASCII), DirFd.readUpTo(f, 64));
            assertEquals(6, DirFd.stat(f).size());
        }
    }

    private static int umask() throws Exception {
        Process p = new ProcessBuilder("sh", "-c", "umask").start();
        String s = new String(p.getInputStream().readAllBytes(), StandardCharsets.US_ASCII).trim();
        p.waitFor();
        return Integer.parseInt(s, 8);
    }
}
