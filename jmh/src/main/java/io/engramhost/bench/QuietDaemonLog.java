package io.engramhost.bench;

import io.engramhost.daemon.DaemonLog;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Field;

/**
 * Drops the daemon's per-connection info lines ("lease 1234 granted ...") inside a benchmark fork, so
 * measured code does not write two stderr lines per handshake; warnings still go through. DaemonLog has
 * no API for its level yet, so this sets its private stream by reflection, and says so when it cannot.
 */
final class QuietDaemonLog {
    private QuietDaemonLog() {
    }

    static void install() {
        try {
            Field f = DaemonLog.class.getDeclaredField("out");
            f.setAccessible(true);
            PrintStream original = (PrintStream) f.get(null);
            if (!(original instanceof WarningsOnly)) {
                f.set(null, new WarningsOnly(original));
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            System.err.println("engram bench: cannot quieten DaemonLog (" + e + "); its info lines stay in the timing");
        }
    }

    /** Passes on only lines that carry "WARN". */
    private static final class WarningsOnly extends PrintStream {
        private final PrintStream target;

        WarningsOnly(PrintStream target) {
            super(OutputStream.nullOutputStream());
            this.target = target;
        }

        @Override
        public void println(String line) {
            if (line != null && line.contains(" WARN: ")) {
                target.println(line);
            }
        }
    }
}
