package io.engramhost.bench;

import io.engramhost.cli.log.EngramLoggerFinder;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Drops the daemon's info lines ("lease 1234 granted ...") inside a benchmark fork, so measured code
 * does not write two stderr lines per handshake; warnings still go through. The daemon logs through
 * {@code System.Logger}; the benchmarks jar carries the CLI's logger finder (its services file is merged
 * by the shade plugin), whose level this lowers to WARNING. Should another finder be in force, its
 * java.util.logging loggers under {@code io.engramhost} are set to WARNING instead.
 */
final class QuietDaemonLog {
    /** Held: java.util.logging keeps its loggers only weakly. */
    private static Logger julRoot;

    private QuietDaemonLog() {
    }

    static void install() {
        if (System.LoggerFinder.getLoggerFinder() instanceof EngramLoggerFinder) {
            EngramLoggerFinder.threshold(System.Logger.Level.WARNING);
        } else {
            julRoot = Logger.getLogger("io.engramhost");
            julRoot.setLevel(Level.WARNING);
        }
    }
}
