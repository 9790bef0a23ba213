package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.os.Posix;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code engram-host serve} as root, as an operator runs it, against a local user (uid 65534 through
 * setpriv) who got to its socket path first, in a sticky directory like /tmp: the daemon refuses with
 * one line naming what it found, or starts without writing through the user's symlinks. docs/security.md.
 */
@Timeout(180)
class SocketSquatProcessTest {
    private static final int NOBODY = 65534;

    @TempDir
    Path base;
    private Path sticky;
    private Path victim;
    private Path ckpt;

    @BeforeEach
    void setUp() throws Exception {
        assumeTrue(Posix.getuid() == 0, "needs root to act as another uid (uid is " + Posix.getuid() + ")");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")), "needs setpriv (util-linux)");
        Files.setPosixFilePermissions(base, PosixFilePermissions.fromString("rwxr-xr-x"));
        victim = Files.writeString(base.resolve("victim"), "precious\n");
        Files.setPosixFilePermissions(victim, PosixFilePermissions.fromString("rw-r--r--"));
        sticky = Files.createDirectory(base.resolve("sticky"));
        Files.setAttribute(sticky, "unix:mode", 01777);
        ckpt = CheckpointGenerator.writeSingle(base.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 200, 64, 1));
    }

    private static Process asNobody(String script) throws Exception {
        return new ProcessBuilder("setpriv", "--reuid=" + NOBODY, "--regid=" + NOBODY, "--clear-groups", "sh", "-c",
                script).redirectErrorStream(true).start();
    }

    private static void runAsNobody(String script) throws Exception {
        Process p = asNobody(script);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), script + ": " + out);
    }

    private CliRun serve(Path socket) throws Exception {
        return CliRun.of("serve", "--socket", socket.toString(), "--checkpoint", ckpt.toString(), "--numa", "none");
    }

    private static void assertOneLine(CliRun r, String... parts) {
        assertEquals(1, r.exit(), r.err());
        assertEquals(1, r.err().lines().filter(l -> l.startsWith("engram-host serve: ")).count(), r.err());
        assertFalse(r.err().contains("\tat "), "no stack trace: " + r.err());
        for (String p : parts) {
            assertTrue(r.err().contains(p), "'" + p + "' missing from: " + r.err());
        }
    }

    @Test
    void shouldRefuseALockHeldByAnotherUserNamingItsOwnerNotItsContent() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path lock = SocketPaths.lockFile(socket);
        Process holder = asNobody("exec 9>'" + lock + "'; echo 1 >&9; flock -n 9 || exit 3; echo ready; exec sleep 120");
        try {
            String line = new BufferedReader(new InputStreamReader(holder.getInputStream(), StandardCharsets.UTF_8))
                    .readLine();
            assertEquals("ready", line);
            CliRun r = serve(socket);
            assertOneLine(r, "another process holds the lock " + lock + " (owner uid 65534 (nobody))");
            assertFalse(r.err().contains("pid=1"), r.err());
            assertFalse(r.err().contains("already running"), r.err());
        } finally {
            holder.destroyForcibly();
            holder.waitFor(10, TimeUnit.SECONDS);
        }
    }

    @Test
    void shouldRefuseASocketDirectoryOfAnotherUser() throws Exception {
        Path evil = sticky.resolve("evil");
        runAsNobody("mkdir -m 0755 '" + evil + "'");
        assertOneLine(serve(evil.resolve("d.sock")), "socket directory " + evil + " belongs to uid 65534 (nobody)");
        runAsNobody("ln -s '" + victim + "' '" + sticky.resolve("x.sock.lock") + "'");
        assertOneLine(serve(sticky.resolve("x.sock")), "refusing the lock file " + sticky.resolve("x.sock.lock")
                + ": it is a symbolic link");
        assertEquals("precious\n", Files.readString(victim));
    }

    /**
     * Links another user planted where the daemon writes: at the socket path and the ready file's, the daemon refuses
     * in one line and leaves the link and its target as they were (it removes only a socket, replaces only a ready
     * file of its own format); at a temporary file's name it serves, writing through none of them.
     */
    @Test
    void shouldNeverWriteThroughOrRemovePlantedSymlinks() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path ready = SocketPaths.readyFile(socket);
        runAsNobody("ln -s '" + victim + "' '" + socket + "'");
        assertOneLine(serve(socket), socket + " is a symbolic link", "refusing to remove it");
        assertTrue(Files.isSymbolicLink(socket), "the link left where it was");
        runAsNobody("rm '" + socket + "'");
        runAsNobody("ln -s '" + victim + "' '" + ready + "'");
        assertOneLine(serve(socket), ready + " is a symbolic link, not an engram-host ready file");
        assertTrue(Files.isSymbolicLink(ready));
        runAsNobody("rm '" + ready + "'");
        runAsNobody("ln -s '" + victim + "' '" + ready.resolveSibling(ready.getFileName() + ".tmp") + "'");
        try (DaemonProcess d = DaemonProcess.start(socket, base.resolve("d.log"), "--checkpoint", ckpt.toString())
                .awaitReady()) {
            assertFalse(Files.isSymbolicLink(ready));
            assertEquals(Long.toString(d.pid()), ReadyFile.read(ready).get("pid"));
            assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(socket,
                    LinkOption.NOFOLLOW_LINKS)));
            CliRun status = CliRun.of("status", "--socket", socket.toString(), "--json");
            assertEquals(0, status.exit(), status.err());
            assertTrue(status.out().contains("\"state\":\"ready\""), status.out());
        }
        assertEquals("precious\n", Files.readString(victim), "the symlinks' target was not written");
        assertEquals("rw-r--r--", PosixFilePermissions.toString(Files.getPosixFilePermissions(victim)),
                "nor its mode changed");
    }
}
