package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.testing.ChildJvm;
import io.engramhost.testing.NoLeaks;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Connect, bind and accept through the project's own libc binding: errno comes from the kernel. */
@Timeout(60)
@NoLeaks
class UnixSocketsTest {
    @TempDir
    Path dir;

    @Test
    void shouldSayEnoentWhenNoSocketIsThere() {
        Path none = dir.resolve("none.sock");
        NativeException e = assertThrows(NativeException.class, () -> UnixConnection.connect(none));
        assertEquals(Errno.ENOENT, e.errno());
        assertEquals("connect(" + none + ") failed: ENOENT (No such file or directory)", e.getMessage());
    }

    @Test
    void shouldSayEconnrefusedWhenTheListenerIsGoneButItsFileStays() {
        Path stale = dir.resolve("stale.sock");
        UnixListener.bind(stale, 1).close(); // closed without unlinking: the socket file stays
        assertTrue(Files.exists(stale));
        NativeException e = assertThrows(NativeException.class, () -> UnixConnection.connect(stale));
        assertEquals(Errno.ECONNREFUSED, e.errno());
        assertEquals("connect(" + stale + ") failed: ECONNREFUSED (Connection refused)", e.getMessage());
    }

    /**
     * The one "no daemon listens" mapping, over what connect really says: no file and a stale socket are no
     * listener (a caller may load from disk); a file of another kind is refused as a stale socket is; a path through a
     * regular file (ENOTDIR), a path too long, and no permission are mistakes to report instead.
     */
    @Test
    void noListenerIsEnoentOrEconnrefusedFromConnectAndNothingElse() throws Exception {
        Path stale = dir.resolve("stale.sock");
        UnixListener.bind(stale, 1).close();
        Path plain = Files.createFile(dir.resolve("plain"));
        assertEquals(Errno.ENOENT, connectErrno(dir.resolve("none.sock")));
        assertEquals(Errno.ECONNREFUSED, connectErrno(stale));
        assertEquals(Errno.ECONNREFUSED, connectErrno(plain));
        assertEquals(DirFd.ENOTDIR, connectErrno(plain.resolve("x.sock")));
        for (int errno : new int[] {Errno.ENOENT, Errno.ECONNREFUSED}) {
            assertTrue(UnixSockets.noListener(errno), Errno.name(errno));
        }
        for (int errno : new int[] {DirFd.ENOTDIR, Errno.ENOTSOCK, Errno.EACCES, Errno.EPERM, Errno.ENAMETOOLONG,
                Errno.EAGAIN, Errno.EINTR, Errno.ECONNRESET, Errno.EADDRINUSE, DirFd.ELOOP, 0}) {
            assertFalse(UnixSockets.noListener(errno), Errno.name(errno));
        }
    }

    private static int connectErrno(Path path) {
        return assertThrows(NativeException.class, () -> UnixConnection.connect(path)).errno();
    }

    @Test
    void shouldSayEaddrinuseWhenBindingAnExistingPath() throws Exception {
        Path taken = Files.createFile(dir.resolve("taken.sock"));
        NativeException e = assertThrows(NativeException.class, () -> UnixListener.bind(taken, 1));
        assertEquals(Errno.EADDRINUSE, e.errno());
        assertEquals("bind(" + taken + ") failed: EADDRINUSE (Address already in use)", e.getMessage());
    }

    @Test
    void shouldRefuseAPathLongerThanSunPathNamingIt() {
        Path deep = dir.resolve("d".repeat(60)).resolve("s".repeat(60) + ".sock");
        NativeException c = assertThrows(NativeException.class, () -> UnixConnection.connect(deep));
        assertEquals(Errno.ENAMETOOLONG, c.errno());
        int bytes = deep.toString().length();
        assertEquals("connect(" + deep + ") failed: ENAMETOOLONG (File name too long); the socket path is " + bytes
                + " bytes; a Unix socket path holds at most 107 (sun_path is 108 bytes with its NUL): choose a shorter"
                + " path or directory", c.getMessage());
        NativeException b = assertThrows(NativeException.class, () -> UnixListener.bind(deep, 1));
        assertEquals(Errno.ENAMETOOLONG, b.errno());
        assertTrue(b.getMessage().startsWith("bind(" + deep + ") failed: ENAMETOOLONG"), b.getMessage());
    }

    @Test
    void shouldAcceptConnectAndTellThePeer() throws Exception {
        Path path = dir.resolve("ok.sock");
        try (UnixListener listener = UnixListener.bind(path, 4)) {
            assertNull(listener.accept(50), "nobody connected");
            try (UnixConnection client = UnixConnection.connect(path);
                    UnixConnection server = listener.accept(5_000)) {
                assertEquals("client of " + path, server.peer());
                assertEquals(Posix.getpid(), server.peerCredentials().pid());
                assertEquals(Posix.getuid(), client.peerCredentials().uid());
                assertFalse(server.awaitReadable(0));
                client.send(ByteBuffer.wrap("hi".getBytes(StandardCharsets.UTF_8)), List.of());
                assertTrue(server.awaitReadable(5_000));
                assertEquals("hi", StandardCharsets.UTF_8.decode(server.receive(16, 0, 1_000).payload()).toString());
                CompletableFuture<Boolean> woken = CompletableFuture.supplyAsync(() -> server.awaitReadable(30_000));
                client.shutdownOutput();
                assertTrue(woken.get(10, TimeUnit.SECONDS), "the peer's EOF wakes a poller");
                BorrowedFd view = client.fd();
                client.close();
                assertThrows(IllegalStateException.class, view::get);
                client.shutdown(); // closed: nothing to shut down
            }
        }
    }

    /** Connects to the socket named by the first argument and prints the outcome. */
    public static final class ConnectProbe {
        public static void main(String[] args) {
            try (UnixConnection c = UnixConnection.connect(Path.of(args[0]))) {
                System.out.println("connected");
            } catch (NativeException e) {
                System.out.println(e.errnoName() + ": " + e.getMessage());
            }
        }
    }

    @Test
    void shouldSayEaccesWithoutPermissionOnTheSocket() throws Exception {
        Path path = dir.resolve("private.sock");
        try (UnixListener listener = UnixListener.bind(path, 4)) {
            Files.setPosixFilePermissions(path, PosixFilePermissions.fromString("---------"));
            if (Posix.getuid() != 0) {
                NativeException e = assertThrows(NativeException.class, () -> UnixConnection.connect(path));
                assertEquals(Errno.EACCES, e.errno());
                return;
            }
            // root passes every permission check through CAP_DAC_OVERRIDE: connect from a child that lacks it
            Path setpriv = Path.of("/usr/bin/setpriv");
            assumeTrue(Files.isExecutable(setpriv), "running as root without " + setpriv + " (util-linux) to drop"
                    + " CAP_DAC_OVERRIDE for the connecting process: EACCES cannot be seen here");
            List<String> cmd = new ArrayList<>(List.of(setpriv.toString(),
                    "--bounding-set=-dac_override,-dac_read_search"));
            cmd.addAll(ChildJvm.command(ConnectProbe.class, List.of(), path.toString()));
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(50, TimeUnit.SECONDS));
            assumeTrue(!out.contains("setpriv:"), "setpriv cannot drop capabilities here: " + out.strip());
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.contains("EACCES: connect(" + path + ") failed: EACCES (Permission denied)"), out);
        }
    }
}
