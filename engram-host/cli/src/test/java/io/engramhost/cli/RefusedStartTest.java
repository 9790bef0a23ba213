package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A refused start leaves nothing behind: for each setting {@code serve} refuses (a busy --metrics-port, a busy
 * --seed-listen address, a --seed-key others may read, a checkpoint that is not there or not a checkpoint, a bad
 * --allow-uid, --seed-from without --seed-key, a --seed-listen that is no address, a --memory-budget too small, a
 * socket a live daemon serves), a daemon process exits non-zero
 * with one line naming the setting, and the socket's directory holds exactly what it held before (no lock file, no
 * socket, no ready file), or, when it was not there, is not there after. A daemon that starts and stops, by contrast,
 * keeps its lock file (DaemonLock: two daemons never lock two files of one name).
 */
@Timeout(240)
class RefusedStartTest {
    @TempDir
    static Path shared;
    private static Path model;
    private static Path key;

    @BeforeAll
    static void model() throws Exception {
        model = SeedProcessTest.generate(shared, "m", "5", 2000);
        key = SeedProcessTest.keyFile(shared.resolve("key"), 32);
    }

    private static List<String> list(Path dir) throws Exception {
        if (!Files.exists(dir)) {
            return List.of("(no directory)");
        }
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    /** Runs serve with {@code args} on {@code socket}; asserts it is refused and returns its output. */
    private static String refused(Path socket, Path log, String... args) throws Exception {
        try (DaemonProcess d = DaemonProcess.start(socket, log, args)) {
            assertTrue(d.process.waitFor(60, TimeUnit.SECONDS), "serve was not refused: " + d.log());
            assertNotEquals(0, d.process.exitValue(), d.log());
            return d.log();
        }
    }

    private static void assertRefusedLeavingNothing(Path dir, String line, String... args) throws Exception {
        List<String> before = list(dir);
        String log = refused(dir.resolve("d.sock"), shared.resolve("refused.log"), args);
        List<String> lines = log.lines().filter(l -> l.startsWith("engram-host serve: ")).toList();
        assertEquals(1, lines.size(), log);
        assertTrue(lines.get(0).contains(line), "the refusal names the setting: " + log);
        assertEquals(before, list(dir), "a refused start leaves the socket directory as it was: " + log);
    }

    @Test
    void shouldLeaveTheSocketDirectoryAsItWasAfterEachRefusedStart(@TempDir Path dir) throws Exception {
        Path run = Files.createDirectory(dir.resolve("run"));
        Files.setPosixFilePermissions(run, PosixFilePermissions.fromString("rwx------"));
        Files.writeString(run.resolve("notes.txt"), "the user's own file\n");
        String ckpt = model.toString();
        try (ServerSocket busy = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            String port = String.valueOf(busy.getLocalPort());
            assertRefusedLeavingNothing(run, "cannot listen on 127.0.0.1:" + port + " (--metrics-port)",
                    "--checkpoint", ckpt, "--metrics-port", port);
            // Netty's epoll transport's own words (its exception class, "bind(..) failed with error(-98)") are not
            // repeated: the kernel's, then the fix, as for --metrics-port
            assertRefusedLeavingNothing(run, "cannot listen on 127.0.0.1:" + port + " (--seed-listen): Address already"
                    + " in use: another process listens on that port (ss -ltnp shows which): stop it, or give"
                    + " --seed-listen another port", "--checkpoint", ckpt, "--seed-listen", "127.0.0.1:" + port,
                    "--seed-key", key.toString());
            // a socket directory this start would create: not there after the refusal either
            assertRefusedLeavingNothing(dir.resolve("new/sub"), "(--metrics-port)", "--checkpoint", ckpt,
                    "--metrics-port", port);
            assertFalse(Files.exists(dir.resolve("new")), "nor its parent, which this start created too");
        }
        Path loose = Files.copy(key, dir.resolve("loose-key"));
        Files.setPosixFilePermissions(loose, PosixFilePermissions.fromString("rw-r--r--"));
        assertRefusedLeavingNothing(run, "--seed-key " + loose + ": mode", "--checkpoint", ckpt, "--seed-listen",
                "127.0.0.1:" + SeedProcessTest.freePort(), "--seed-key", loose.toString());
        assertRefusedLeavingNothing(run, dir.resolve("no-such-model").toString(), "--checkpoint",
                dir.resolve("no-such-model").toString());
        // a file that is not a checkpoint, and settings refused before anything is opened (usage errors, exit 2)
        Path garbage = Files.writeString(dir.resolve("garbage.safetensors"), "garbage\n");
        assertRefusedLeavingNothing(run, garbage + ": not a safetensors file", "--checkpoint", garbage.toString());
        assertRefusedLeavingNothing(dir.resolve("new2"), garbage + ": not a safetensors file", "--checkpoint",
                garbage.toString());
        assertRefusedLeavingNothing(run, "--allow-uid: -5 is not a uid", "--checkpoint", ckpt, "--allow-uid", "-5");
        assertRefusedLeavingNothing(run, "--seed-key FILE is needed with --seed-from", "--checkpoint", ckpt,
                "--seed-from", "127.0.0.1:1");
        assertRefusedLeavingNothing(run, "--seed-listen must name an IP address", "--checkpoint", ckpt,
                "--seed-listen", "nothost:1", "--seed-key", key.toString());
        assertRefusedLeavingNothing(run, "--seed-key " + dir.resolve("no-key") + ": no such file: give --seed-key the"
                + " path of one (a key needs 32 to 4096", "--checkpoint", ckpt, "--seed-listen", "127.0.0.1:1",
                "--seed-key", dir.resolve("no-key").toString());
        assertRefusedLeavingNothing(run, "--memory-budget gives only", "--checkpoint", ckpt, "--memory-budget", "1K");
        assertEquals(List.of("notes.txt"), list(run));

        // a daemon that served keeps its lock file when it stops, as it always has
        List<String> args = new ArrayList<>(List.of("--checkpoint", ckpt));
        try (DaemonProcess d = DaemonProcess.start(run.resolve("d.sock"), dir.resolve("served.log"),
                args.toArray(String[]::new)).awaitReady()) {
            assertEquals(List.of("d.sock", "d.sock.lock", "d.sock.ready", "notes.txt"), list(run));
            // a second daemon on its socket is refused, naming the live one, and leaves its files as they are
            assertRefusedLeavingNothing(run, "engram-host is already running (pid=" + d.process.pid() + ")",
                    "--checkpoint", ckpt);
            assertEquals(List.of("d.sock", "d.sock.lock", "d.sock.ready", "notes.txt"), list(run));
        }
        assertEquals(List.of("d.sock.lock", "notes.txt"), list(run));
        // and a refused start then leaves that lock file, which it did not create, where it is
        try (ServerSocket busy = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            assertRefusedLeavingNothing(run, "(--metrics-port)", "--checkpoint", ckpt, "--metrics-port",
                    String.valueOf(busy.getLocalPort()));
        }
    }
}
