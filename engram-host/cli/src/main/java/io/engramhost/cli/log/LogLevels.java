package io.engramhost.cli.log;

import java.lang.System.Logger.Level;
import java.util.List;
import java.util.Locale;

/** The levels {@code serve --log-level} takes, most severe first, and their names in lines and options. */
public final class LogLevels {
    /** The levels an operator picks from. */
    public static final List<Level> CHOICES = List.of(Level.ERROR, Level.WARNING, Level.INFO, Level.DEBUG, Level.TRACE);

    private LogLevels() {
    }

    /** ERROR, WARNING, INFO, DEBUG or TRACE, in any case ({@code WARN} too). */
    public static Level of(String name) {
        String n = name.trim().toUpperCase(Locale.ROOT);
        if (n.equals("WARN")) {
            return Level.WARNING;
        }
        for (Level l : CHOICES) {
            if (l.getName().equals(n)) {
                return l;
            }
        }
        throw new IllegalArgumentException("unknown log level '" + name + "'; one of error, warning, info, debug, trace");
    }

    /**
     * The sd-daemon(3) priority prefix journald reads from a line on a stream: {@code <3>} error,
     * {@code <4>} warning, {@code <6>} info, {@code <7>} debug (and trace).
     */
    static int syslogPriority(Level level) {
        return switch (level) {
            case ERROR -> 3;
            case WARNING -> 4;
            case INFO -> 6;
            default -> 7;
        };
    }

    /** What a text line says after {@code engram-host}: nothing for info (as the lines always were), else the level. */
    static String textTag(Level level) {
        return switch (level) {
            case INFO -> "";
            case WARNING -> " WARN";
            default -> " " + level.getName();
        };
    }
}
