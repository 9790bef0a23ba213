package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.protocol.SocketPaths;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Nothing of the user's is removed or replaced at the socket path (issue 25): {@code serve}, {@code status} and
 * {@code stop} given a user's file as {@code --socket} each say so in one line, exit 1 and leave the file as it was;
 * so do a lock or ready file that is not in the daemon's format. A dead daemon's own files are still cleared.
 */
@Timeout(180)
class SocketPathSafetyProcessTest {
    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 64, 32, 1));
    }

    /** Exit 1, the error in one line (serve logs its checkpoint check before it). */
    private static void assertOneLine(CliRun r) {
        assertEquals(1, r.exit(), r.out() + r.err());
        assertEquals(1, r.err().strip().lines().filter(l -> l.startsWith("engram-host ")).count(), r.err());
    }

    @Test
    void serveStatusAndStopLeaveAUsersFileAtTheSocketPathAlone(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path notes = Files.writeString(dir.resolve("notes.txt"), "my notes\n");
        CliRun serve = CliRun.of("serve", "--socket", notes.toString(), "--checkpoint", ckpt.toString(), "--numa",
                "none");
        assertOneLine(serve);
        assertTrue(serve.err().contains(notes + " is a regular file owned by uid 0 (root), not a socket: refusing to"
                + " remove it; give --socket a path where nothing is"), serve.err());
        for (String command : new String[] {"status", "stop"}) {
            CliRun r = CliRun.of(command, "--socket", notes.toString());
            assertOneLine(r);
            assertTrue(r.err().contains(notes.toString()), r.err());
        }
        assertEquals("my notes\n", Files.readString(notes), "the user's file is as it was");
        assertFalse(Files.exists(SocketPaths.readyFile(notes)), "no ready file was made beside it");
    }

    @Test
    void serveLeavesAReadyOrLockFileNotInItsFormatAlone(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/d.sock");
        Files.createDirectories(socket.getParent());
        Path ready = Files.writeString(SocketPaths.readyFile(socket), "not a ready file\n");
        CliRun serve = CliRun.of("serve", "--socket", socket.toString(), "--checkpoint", ckpt.toString(), "--numa",
                "none");
        assertOneLine(serve);
        assertTrue(serve.err().contains(ready + " is not an engram-host ready file"), serve.err());
        assertEquals("not a ready file\n", Files.readString(ready));
        Files.delete(ready);
        Path lock = Files.writeString(SocketPaths.lockFile(socket), "a list of things\n");
        serve = CliRun.of("serve", "--socket", socket.toString(), "--checkpoint", ckpt.toString(), "--numa", "none");
        assertOneLine(serve);
        assertTrue(serve.err().contains("refusing the lock file " + lock + ": it holds 17 bytes that are not a"
                + " daemon's pid"), serve.err());
        assertEquals("a list of things\n", Files.readString(lock));
    }

    @Test
    void aDeadDaemonsFilesAreStillCleared(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/d.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("a.log"), "--checkpoint", ckpt.toString())
                .awaitReady()) {
            d.process.destroyForcibly().waitFor(); // SIGKILL: the socket, the lock and the ready file stay
        }
        assertTrue(Files.exists(SocketPaths.readyFile(socket)) && Files.exists(socket));
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("b.log"), "--checkpoint", ckpt.toString())
                .awaitReady()) {
            String log = d.log();
            assertTrue(log.contains("removed " + socket + ", a socket left by a daemon that is gone"), log);
            assertTrue(log.contains("removed " + SocketPaths.readyFile(socket) + ", a regular file left by a daemon"
                    + " that is gone"), log);
        }
    }
}
