package io.engramhost.daemon;

import java.io.PrintStream;
import java.time.Instant;
import java.time.temporal.ChronoUnit;

/** The daemon's log: one timestamped line per event on stderr. */
public final class DaemonLog {
    private static volatile PrintStream out = System.err;

    private DaemonLog() {
    }

    public static void info(String message) {
        out.println(Instant.now().truncatedTo(ChronoUnit.MILLIS) + " engram-host: " + message);
    }

    public static void warn(String message) {
        out.println(Instant.now().truncatedTo(ChronoUnit.MILLIS) + " engram-host WARN: " + message);
    }
}
