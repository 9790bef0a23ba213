package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.os.Posix;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Other uids: the socket is private unless --allow-uid opens it, and then SO_PEERCRED admits only
 * the listed uids. The client runs as the user nobody (setpriv), as the C client of the wire
 * protocol (native/build/engram-attach), since a JVM as nobody could not read the build's jars.
 */
@Timeout(120)
class AllowUidTest {
    // user.dir is this module, engram-host/cli: the C client is built two levels up, in native/build.
    private static final Path C_CLIENT = Path.of(System.getProperty("user.dir")).getParent()
            .resolveSibling("native/build/engram-attach");
    private static final int NOBODY = 65534;

    private static Path sharedDir() throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "engram-uid-");
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxr-xr-x"));
        return dir;
    }

    private static String asNobody(Path socket) throws Exception {
        Process p = new ProcessBuilder("setpriv", "--reuid=" + NOBODY, "--regid=" + NOBODY, "--clear-groups",
                C_CLIENT.toString(), "--socket", socket.toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        return p.exitValue() + ": " + out;
    }

    @Test
    void shouldAdmitOnlyTheListedUids() throws Exception {
        assumeTrue(Posix.getuid() == 0, "needs root to run a client as another uid (uid is " + Posix.getuid() + ")");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")), "needs setpriv (util-linux)");
        assumeTrue(Files.isExecutable(C_CLIENT), C_CLIENT + " is not built: make -C native engram-attach");
        Path dir = sharedDir();
        try {
            Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 500, 64, 1));
            Files.setPosixFilePermissions(dir.resolve("ckpt"), PosixFilePermissions.fromString("rwxr-xr-x"));
            Path privateSocket = dir.resolve("private/p.sock");
            try (DaemonProcess d = DaemonProcess.start(privateSocket, dir.resolve("p.log"), "--checkpoint",
                    ckpt.toString()).awaitReady()) {
                String r = asNobody(privateSocket);
                assertTrue(r.startsWith("1: ") && r.contains("EACCES"), "a private socket refuses other uids: " + r);
                assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(privateSocket.getParent())));
            }
            Path openSocket = dir.resolve("open/o.sock");
            try (DaemonProcess d = DaemonProcess.start(openSocket, dir.resolve("o.log"), "--checkpoint", ckpt.toString(),
                    "--allow-uid", "12345").awaitReady()) {
                String r = asNobody(openSocket);
                assertTrue(r.startsWith("1: ") && r.contains("NOT_ALLOWED") && r.contains("uid " + NOBODY),
                        "an unlisted uid is refused by SO_PEERCRED: " + r);
                assertTrue(d.log().contains("refused pid") && d.log().contains("uid " + NOBODY), d.log());
            }
            try (DaemonProcess d = DaemonProcess.start(dir.resolve("ok/k.sock"), dir.resolve("k.log"), "--checkpoint",
                    ckpt.toString(), "--allow-uid", Integer.toString(NOBODY)).awaitReady()) {
                String r = asNobody(dir.resolve("ok/k.sock"));
                assertTrue(r.startsWith("0: "), "a listed uid imports: " + r);
            }
        } finally {
            try (var s = Files.walk(dir)) {
                s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    /**
     * --allow-uid keeps the mode of a socket directory that exists (it sets 0755 only on one it creates): one left
     * 0700, say by a daemon started without --allow-uid, shuts the admitted uids out with EACCES. The daemon used to
     * say nothing; it now warns, naming the directory and its mode. A 0755 one gets no warning.
     */
    @Test
    void shouldWarnWhenAnExistingSocketDirectoryShutsTheAdmittedUidsOut() throws Exception {
        Path dir = sharedDir();
        try {
            Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 500, 64, 1));
            Files.setPosixFilePermissions(dir.resolve("ckpt"), PosixFilePermissions.fromString("rwxr-xr-x"));
            Path closed = Files.createDirectory(dir.resolve("closed"));
            Files.setPosixFilePermissions(closed, PosixFilePermissions.fromString("rwx------"));
            try (DaemonProcess d = DaemonProcess.start(closed.resolve("c.sock"), dir.resolve("c.log"), "--checkpoint",
                    ckpt.toString(), "--allow-uid", Integer.toString(NOBODY)).awaitReady()) {
                assertTrue(d.log().contains("WARN: --allow-uid: " + closed + " (rwx------) is not searchable by other"
                        + " users, so the admitted uids cannot reach the socket"), d.log());
                if (Posix.getuid() == 0 && Files.isExecutable(Path.of("/usr/bin/setpriv")) && Files.isExecutable(C_CLIENT)) {
                    String r = asNobody(closed.resolve("c.sock"));
                    assertTrue(r.startsWith("1: ") && r.contains("EACCES"), "what the warning is about: " + r);
                }
            }
            Path open = Files.createDirectory(dir.resolve("open"));
            Files.setPosixFilePermissions(open, PosixFilePermissions.fromString("rwxr-xr-x"));
            try (DaemonProcess d = DaemonProcess.start(open.resolve("o.sock"), dir.resolve("o.log"), "--checkpoint",
                    ckpt.toString(), "--allow-uid", Integer.toString(NOBODY)).awaitReady()) {
                assertTrue(!d.log().contains("not searchable"), d.log());
            }
        } finally {
            try (var s = Files.walk(dir)) {
                s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }
}
