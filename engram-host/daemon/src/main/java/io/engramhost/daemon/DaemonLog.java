package io.engramhost.daemon;

import java.io.PrintStream;
import java.time.Instant;
import java.time.temporal.ChronoUnit;

/** The daemon's log: one timestamped line per event on stderr (or where {@link #output} says). */
public final class DaemonLog {
    private static volatile PrintStream out = System.err;
    private static volatile boolean infoEnabled = true;

    private DaemonLog() {
    }

    /** Where the lines go, for a daemon embedded in another program. */
    public static void output(PrintStream stream) {
        out = stream;
    }

    /** Whether info lines (one per lease, per phase) are written; warnings always are. */
    public static void infoEnabled(boolean enabled) {
        infoEnabled = enabled;
    }

    public static void info(String message) {
        if (infoEnabled) {
            out.println(Instant.now().truncatedTo(ChronoUnit.MILLIS) + " engram-host: " + message);
        }
    }

    public static void warn(String message) {
        out.println(Instant.now().truncatedTo(ChronoUnit.MILLIS) + " engram-host WARN: " + message);
    }
}
