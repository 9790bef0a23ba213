package io.engramhost.daemon;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.os.Posix;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/**
 * An unprivileged local user, uid 65534 (nobody), acting in separate processes through
 * {@code setpriv} (util-linux) while the test process, root, plays the daemon.
 */
final class Attacker implements AutoCloseable {
    static final int UID = 65534;
    private static final String[] AS_NOBODY = {"setpriv", "--reuid=" + UID, "--regid=" + UID, "--clear-groups"};

    private final Process process;

    private Attacker(Process process) {
        this.process = process;
    }

    /** Skips the test where it cannot run: it needs root and setpriv. */
    static void assumeAvailable() {
        assumeTrue(Posix.getuid() == 0, "needs root to act as another uid (uid is " + Posix.getuid() + ")");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")) || Files.isExecutable(Path.of("/bin/setpriv")),
                "needs setpriv (util-linux)");
    }

    /** Runs {@code script} (sh) as the attacker and returns its output; it must succeed. */
    static String run(String script) throws Exception {
        Process p = start(script);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), "attacker script did not end: " + script);
        assertEquals(0, p.exitValue(), "attacker script failed: " + script + ": " + out);
        return out;
    }

    /**
     * Starts {@code script} as the attacker and waits for its first line, which must be {@code ready}:
     * for a script that holds something (a lock) until it is killed.
     */
    static Attacker holding(String script) throws Exception {
        Process p = start(script);
        BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String line = r.readLine();
        if (!"ready".equals(line)) {
            p.destroyForcibly();
            throw new AssertionError("attacker script did not get ready (" + line + "): " + script);
        }
        return new Attacker(p);
    }

    private static Process start(String script) throws Exception {
        String[] cmd = new String[AS_NOBODY.length + 3];
        System.arraycopy(AS_NOBODY, 0, cmd, 0, AS_NOBODY.length);
        cmd[AS_NOBODY.length] = "sh";
        cmd[AS_NOBODY.length + 1] = "-c";
        cmd[AS_NOBODY.length + 2] = script;
        return new ProcessBuilder(cmd).redirectErrorStream(true).start();
    }

    /** Ends the attacker's process (by its pid), and so whatever it held. */
    @Override
    public void close() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(10, TimeUnit.SECONDS);
    }

    /** {@code 'path'}, quoted for sh. */
    static String q(Path p) {
        return "'" + p.toString().replace("'", "'\\''") + "'";
    }
}
