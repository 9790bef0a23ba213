package io.engramhost.bench;

import io.engramhost.daemon.DaemonLog;

/**
 * Drops the daemon's info lines ("lease 1234 granted ...") inside a benchmark fork, so measured code
 * does not write two stderr lines per handshake; warnings still go through.
 */
final class QuietDaemonLog {
    private QuietDaemonLog() {
    }

    static void install() {
        DaemonLog.infoEnabled(false);
    }
}
