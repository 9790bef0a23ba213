package io.engramhost.cli.log;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.json.JsonReader;
import io.engramhost.util.Text;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.System.Logger.Level;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The framing of the daemon's log lines: text, text under journald, JSON; and the level that filters them. */
class LogLineTest {
    private static final Instant AT = Instant.parse("2025-03-04T05:06:07Z"); // whole second: millis still shown

    @AfterEach
    void restore() {
        EngramLoggerFinder.output(System.err, System.getenv("JOURNAL_STREAM") != null);
        EngramLoggerFinder.configure(Level.INFO, LogFormat.TEXT);
    }

    @Test
    void shouldWriteOneJsonObjectPerLineWithItsFields() {
        for (Level level : LogLevels.CHOICES) {
            String line = LogLine.format(LogFormat.JSON, false, AT, 42, level, "io.engramhost.daemon.Daemon",
                    "listening on /run/x.sock \"quoted\"\ttab", null);
            assertFalse(line.contains("\n"), line);
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) JsonReader.parse(line);
            assertEquals("2025-03-04T05:06:07.000Z", m.get("ts"));
            assertEquals(level.getName(), m.get("level"));
            assertEquals("io.engramhost.daemon.Daemon", m.get("logger"));
            assertEquals("listening on /run/x.sock \"quoted\"\ttab", m.get("msg"));
            assertEquals(42L, ((Number) m.get("pid")).longValue());
        }
        String journal = LogLine.format(LogFormat.JSON, true, AT, 1, Level.INFO, "l", "m", null);
        assertTrue(journal.startsWith("{"), "JSON keeps its time and no priority prefix under journald: " + journal);
    }

    @Test
    void shouldStampTextLinesOnlyOutsideJournald() {
        assertEquals("2025-03-04T05:06:07.000Z engram-host: ready: 4 tables",
                LogLine.format(LogFormat.TEXT, false, AT, 1, Level.INFO, "l", "ready: 4 tables", null));
        assertEquals("2025-03-04T05:06:07.000Z engram-host WARN: cannot remove x",
                LogLine.format(LogFormat.TEXT, false, AT, 1, Level.WARNING, "l", "cannot remove x", null));
        assertEquals("<3>engram-host ERROR: fatal: thread t died",
                LogLine.format(LogFormat.TEXT, true, AT, 1, Level.ERROR, "l", "fatal: thread t died", null));
        assertEquals("<4>engram-host WARN: w", LogLine.format(LogFormat.TEXT, true, AT, 1, Level.WARNING, "l", "w", null));
        assertEquals("<6>engram-host: i", LogLine.format(LogFormat.TEXT, true, AT, 1, Level.INFO, "l", "i", null));
        assertEquals("<7>engram-host DEBUG: d", LogLine.format(LogFormat.TEXT, true, AT, 1, Level.DEBUG, "l", "d", null));
        assertEquals("<7>engram-host TRACE: t", LogLine.format(LogFormat.TEXT, true, AT, 1, Level.TRACE, "l", "t", null));
        assertEquals("<4>engram-host WARN: failed: java.io.IOException: gone", LogLine.format(LogFormat.TEXT, true, AT, 1,
                Level.WARNING, "l", "failed", new java.io.IOException("gone")));
    }

    @Test
    void shouldKeepAPeersTextOnItsLineInText() {
        // what a seeding peer's ERROR may carry: a line of its own, a carriage return, a terminal escape, U+2028
        String peer = "peer 10.0.0.7:7070 refused: BUSY x\n2025-03-04T05:06:07.000Z engram-host: ready\rover\u001b[2J"
                + "\u2028y\u0085z\tt";
        String escaped = "peer 10.0.0.7:7070 refused: BUSY x\\n2025-03-04T05:06:07.000Z engram-host: ready\\rover"
                + "\\u001b[2J\\u2028y\\u0085z\\tt";
        assertEquals("2025-03-04T05:06:07.000Z engram-host WARN: seed: " + escaped,
                LogLine.format(LogFormat.TEXT, false, AT, 1, Level.WARNING, "l", "seed: " + peer, null));
        assertEquals("<4>engram-host WARN: seed: " + escaped,
                LogLine.format(LogFormat.TEXT, true, AT, 1, Level.WARNING, "l", "seed: " + peer, null));
        assertEquals("<4>engram-host WARN: failed: java.io.IOException: a\\nb", LogLine.format(LogFormat.TEXT, true,
                AT, 1, Level.WARNING, "l", "failed", new java.io.IOException("a\nb")));
        // JSON escapes them itself, and the message reads back as it was
        String json = LogLine.format(LogFormat.JSON, false, AT, 1, Level.WARNING, "l", peer, null);
        assertFalse(json.contains("\n") || json.contains("\r") || json.contains("\u001b"), json);
        assertEquals(peer, ((Map<?, ?>) JsonReader.parse(json)).get("msg"));
        String plain = "ready: 4 tables, 39.0 GiB (layers.1.engram.embed.weight, ...) é ü 中";
        assertSame(plain, Text.oneLine(plain), "a message without control characters is written as it is");
        assertTrue(Text.isOneLine(plain));
        assertFalse(Text.isOneLine(peer));
        assertFalse(Text.isOneLine("x\u0085"), "NEL, a C1 control");
    }

    @Test
    void shouldHideLinesBelowTheLevel() {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        EngramLoggerFinder.output(new PrintStream(bytes, true, StandardCharsets.UTF_8), true);
        System.Logger log = new EngramLoggerFinder().getLogger("io.engramhost.test", getClass().getModule());
        EngramLoggerFinder.configure(Level.INFO, LogFormat.TEXT);
        assertFalse(log.isLoggable(Level.DEBUG));
        log.log(Level.DEBUG, "hidden debug");
        log.log(Level.TRACE, () -> "hidden trace");
        log.log(Level.INFO, "shown info");
        log.log(Level.WARNING, "shown {0} of {1}", 1, 2);
        EngramLoggerFinder.configure(Level.WARNING, LogFormat.TEXT);
        log.log(Level.INFO, "hidden info");
        log.log(Level.ERROR, "shown error");
        EngramLoggerFinder.configure(Level.TRACE, LogFormat.TEXT);
        log.log(Level.DEBUG, "shown debug");
        assertEquals(List.of("<6>engram-host: shown info", "<4>engram-host WARN: shown 1 of 2",
                "<3>engram-host ERROR: shown error", "<7>engram-host DEBUG: shown debug"),
                bytes.toString(StandardCharsets.UTF_8).lines().toList());
    }

    @Test
    void shouldNameLevelsAsOperatorsWriteThem() {
        assertEquals(Level.WARNING, LogLevels.of("warn"));
        assertEquals(Level.WARNING, LogLevels.of("WARNING"));
        assertEquals(Level.DEBUG, LogLevels.of("Debug"));
        assertThrows(IllegalArgumentException.class, () -> LogLevels.of("verbose"));
        assertEquals(LogFormat.JSON, LogFormat.of("json"));
        assertThrows(IllegalArgumentException.class, () -> LogFormat.of("xml"));
    }

    @Test
    void shouldBeTheFinderTheCliInstalls() {
        assertTrue(System.LoggerFinder.getLoggerFinder() instanceof EngramLoggerFinder,
                "META-INF/services names it: " + System.LoggerFinder.getLoggerFinder());
    }
}
