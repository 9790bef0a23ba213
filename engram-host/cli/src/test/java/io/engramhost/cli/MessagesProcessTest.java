package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Messages a person can act on (issue 27, 6), each against the real CLI: every one is one line that names the fix,
 * and a usage error exits 2.
 */
@Timeout(240)
class MessagesProcessTest {
    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 64, 32, 1));
    }

    @Test
    void alreadyRunningNamesTheRemedies(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/d.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString())
                .awaitReady()) {
            CliRun second = CliRun.of("serve", "--socket", socket.toString(), "--checkpoint", ckpt.toString(), "--numa",
                    "none");
            assertEquals(1, second.exit(), second.err());
            String line = second.err().strip().lines().reduce((a, b) -> b).orElse("");
            assertTrue(line.contains("already running (pid=" + d.pid() + ")") && line.contains("stop it (engram-host"
                    + " stop --socket " + socket + ")") && line.contains("take it over (serve --takeover")
                    && line.contains("another --instance"), line);
        }
    }

    @Test
    void anUnknownCommandSaysTryEngramHostHelp() throws Exception {
        CliRun r = CliRun.of("frobnicate");
        assertEquals(2, r.exit(), r.err());
        assertTrue(r.err().contains("Try 'engram-host --help'."), r.err());
        assertFalse(r.err().contains("engram-host engram-host"), r.err());
    }

    @Test
    void aMalformedExpectIsAUsageError(@TempDir Path dir) throws Exception {
        CliRun r = CliRun.of("import", "--socket", dir.resolve("x.sock").toString(), "--expect", "abc");
        assertEquals(2, r.exit(), r.err());
        assertTrue(r.err().contains("--expect takes the 64 hex digits of a fingerprint's SHA-256"), r.err());
        assertTrue(r.err().contains("Try 'engram-host import --help'."), r.err());
    }

    @Test
    void noDaemonNamesTheWaysToFindOne(@TempDir Path dir) throws Exception {
        CliRun r = CliRun.of("status", "--socket", dir.resolve("none.sock").toString());
        assertEquals(1, r.exit(), r.err());
        assertEquals(1, r.err().strip().lines().count(), r.err());
        assertTrue(r.err().contains("start one (engram-host serve), or name the running one's socket with --socket or"
                + " ENGRAM_HOST_SOCKET"), r.err());
    }

    @Test
    void theDemoPrintsWordsNotJavaMaps() throws Exception {
        CliRun r = CliRun.of("demo");
        assertEquals(0, r.exit(), r.out() + r.err());
        assertFalse(r.out().contains("{") || r.out().contains("="), r.out());
        assertTrue(r.out().contains("pages on node"), r.out());
    }
}
