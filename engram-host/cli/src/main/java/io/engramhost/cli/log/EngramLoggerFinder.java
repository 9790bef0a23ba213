package io.engramhost.cli.log;

import java.io.PrintStream;
import java.lang.System.Logger;
import java.lang.System.Logger.Level;
import java.text.MessageFormat;
import java.time.Instant;
import java.util.ResourceBundle;
import java.util.function.Supplier;

/**
 * The CLI's {@link System.LoggerFinder} (META-INF/services): every {@code System.getLogger} of the process,
 * the daemon's and the libraries', writes through it to standard error, one line an event, at or above
 * one level. The library modules only call {@code System.getLogger}; the format, the level and the
 * journald framing are decided here ({@link #configure}), by {@code serve --log-level/--log-format}.
 */
public final class EngramLoggerFinder extends System.LoggerFinder {
    private static final long PID = ProcessHandle.current().pid();
    private static volatile Level threshold = Level.INFO;
    private static volatile LogFormat format = LogFormat.TEXT;
    private static volatile boolean journal = System.getenv("JOURNAL_STREAM") != null;
    private static volatile PrintStream out = System.err;

    public EngramLoggerFinder() {
    }

    /** The level and format of every line from now on. */
    public static void configure(Level level, LogFormat logFormat) {
        threshold = level;
        format = logFormat;
    }

    /** Only lines at {@code level} or more severe (a benchmark's daemon keeps quiet with WARNING). */
    public static void threshold(Level level) {
        threshold = level;
    }

    public static Level threshold() {
        return threshold;
    }

    public static LogFormat format() {
        return format;
    }

    /** Whether lines are framed for journald: JOURNAL_STREAM was set at start, or a test said so. */
    public static boolean journal() {
        return journal;
    }

    /** For tests: where lines go and whether they are framed for journald. */
    static void output(PrintStream stream, boolean underJournal) {
        out = stream;
        journal = underJournal;
    }

    @Override
    public Logger getLogger(String name, Module module) {
        return new EngramLogger(name);
    }

    private static final class EngramLogger implements Logger {
        private final String name;

        EngramLogger(String name) {
            this.name = name;
        }

        @Override
        public String getName() {
            return name;
        }

        @Override
        public boolean isLoggable(Level level) {
            return level != Level.OFF && level.getSeverity() >= threshold.getSeverity();
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {
            if (isLoggable(level)) {
                write(level, localized(bundle, msg), thrown);
            }
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String fmt, Object... params) {
            if (isLoggable(level)) {
                String m = localized(bundle, fmt);
                write(level, params == null || params.length == 0 ? m : MessageFormat.format(m, params), null);
            }
        }

        @Override
        public void log(Level level, Supplier<String> supplier) {
            if (isLoggable(level)) {
                write(level, supplier.get(), null);
            }
        }

        private void write(Level level, String msg, Throwable thrown) {
            Level shown = level == Level.ALL ? Level.TRACE : level;
            Console.println(out, LogLine.format(format, journal, Instant.now(), PID, shown, name, msg, thrown));
        }

        private static String localized(ResourceBundle bundle, String msg) {
            if (bundle != null && msg != null && bundle.containsKey(msg)) {
                return bundle.getString(msg);
            }
            return msg;
        }
    }
}
