package io.engramhost.cli.log;

import io.engramhost.json.JsonWriter;
import io.engramhost.util.Text;
import java.lang.System.Logger.Level;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One log event as one line, in a {@link LogFormat}. The message is written as given, except that in text a control
 * character or a Unicode line or paragraph separator is written as an escape (a backslash and n, r or t, else a
 * backslash, u and four hex digits): a message can carry what a peer sent (a seeding peer's ERROR, a file's tensor
 * name), and no peer may start a line of its own in the log or reach the terminal. JSON escapes them already.
 */
final class LogLine {
    /** ISO-8601 in UTC, always with milliseconds. */
    static final DateTimeFormatter TS = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'")
            .withZone(ZoneOffset.UTC);

    private LogLine() {
    }

    /**
     * {@code journal}: the line goes to journald (JOURNAL_STREAM), which stamps the time itself and reads
     * the {@code <N>} priority prefix; a text line then has no timestamp of its own.
     */
    static String format(LogFormat format, boolean journal, Instant now, long pid, Level level, String logger,
            String message, Throwable thrown) {
        String msg = thrown == null ? String.valueOf(message) : message + ": " + thrown;
        if (format == LogFormat.JSON) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("ts", TS.format(now));
            m.put("level", level.getName());
            m.put("logger", logger);
            m.put("msg", msg);
            m.put("pid", pid);
            return JsonWriter.write(m);
        }
        String text = "engram-host" + LogLevels.textTag(level) + ": " + Text.oneLine(msg);
        return journal ? "<" + LogLevels.syslogPriority(level) + ">" + text : TS.format(now) + " " + text;
    }
}
