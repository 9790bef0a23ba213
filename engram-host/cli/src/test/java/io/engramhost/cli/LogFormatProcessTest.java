package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.json.JsonReader;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A daemon process logs its usual lines in each --log-format, at its --log-level, framed for journald or not. */
@Timeout(180)
class LogFormatProcessTest {
    private static final Pattern STAMPED = Pattern.compile("^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z engram-host( [A-Z]+)?: .*");

    private static String serveAndStop(Path dir, Map<String, String> env, String... logArgs) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0), 64, 64, 3));
        Path socket = dir.resolve("run/l.sock");
        String[] args = new String[logArgs.length + 2];
        args[0] = "--checkpoint";
        args[1] = ckpt.toString();
        System.arraycopy(logArgs, 0, args, 2, logArgs.length);
        try (DaemonProcess d = DaemonProcess.startWithEnvironment(env, socket, dir.resolve("d.log"), args).awaitReady()) {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!d.log().contains("ready: ") && System.nanoTime() < until) {
                Thread.sleep(10); // the ready file comes a moment before its log line
            }
            d.process.destroy();
            assertTrue(d.process.waitFor(30, TimeUnit.SECONDS), d.log());
            return d.log();
        }
    }

    private static Map<String, String> journal(String value) {
        Map<String, String> env = new HashMap<>();
        env.put("JOURNAL_STREAM", value); // null: removed
        return env;
    }

    private static void assertUsualLines(String log) {
        for (String usual : List.of("checkpoint valid: 2 tables", "listening on ", "creating 1 memfd regions", "ready: 2 tables",
                "stopped (signal)")) {
            assertTrue(log.contains(usual), usual + " in " + log);
        }
    }

    @Test
    void shouldLogOneJsonObjectPerLine(@TempDir Path dir) throws Exception {
        String log = serveAndStop(dir, journal("8:1234"), "--log-format", "json", "--log-level", "debug");
        assertUsualLines(log);
        boolean debug = false;
        for (String line : log.lines().toList()) {
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) JsonReader.parse(line);
            for (String f : List.of("ts", "level", "logger", "msg", "pid")) {
                assertTrue(m.containsKey(f), f + " in " + line);
            }
            assertTrue(String.valueOf(m.get("ts")).matches("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z"), line);
            assertTrue(List.of("ERROR", "WARNING", "INFO", "DEBUG", "TRACE").contains(m.get("level")), line);
            // each line names the class that logs it: the daemon listens, the load run (LoadRun) says it is ready
            if (String.valueOf(m.get("msg")).startsWith("ready: ")) {
                assertEquals("INFO", m.get("level"), line);
                assertEquals("io.engramhost.daemon.LoadRun", m.get("logger"), line);
            }
            if (String.valueOf(m.get("msg")).startsWith("listening on")) {
                assertEquals("INFO", m.get("level"), line);
                assertEquals("io.engramhost.daemon.Daemon", m.get("logger"), line);
            }
            debug |= m.get("level").equals("DEBUG") && String.valueOf(m.get("msg")).startsWith("region 1 of 1 created");
        }
        assertTrue(debug, "--log-level debug shows the region lines: " + log);
    }

    @Test
    void shouldStampTextLinesOutsideJournaldAndHideDebugAtInfo(@TempDir Path dir) throws Exception {
        String log = serveAndStop(dir, journal(null));
        assertUsualLines(log);
        for (String line : log.lines().toList()) {
            assertTrue(STAMPED.matcher(line).matches(), "timestamped: " + line);
        }
        assertFalse(log.contains("DEBUG") || log.contains("created:"), "no debug lines at info: " + log);
    }

    @Test
    void shouldLeaveTheTimeToJournaldWithPriorities(@TempDir Path dir) throws Exception {
        String log = serveAndStop(dir, journal("8:1234"), "--log-level", "DEBUG");
        assertUsualLines(log);
        for (String line : log.lines().toList()) {
            assertTrue(line.matches("<[3467]>engram-host( [A-Z]+)?: .*"), "priority, no timestamp: " + line);
        }
        assertTrue(log.contains("<6>engram-host: ready: 2 tables"), log);
        assertTrue(log.contains("<7>engram-host DEBUG: region 1 of 1 created"), log);
    }

    @Test
    void shouldRefuseAnUnknownLevel() throws Exception {
        CliRun r = CliRun.of("serve", "--checkpoint", "/nonexistent", "--log-level", "verbose");
        assertEquals(2, r.exit(), r.err());
        assertTrue(r.err().contains("unknown log level 'verbose'"), r.err());
    }
}
