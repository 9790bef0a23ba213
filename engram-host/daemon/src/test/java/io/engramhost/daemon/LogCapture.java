package io.engramhost.daemon;

import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * The daemon's log lines ({@code System.Logger}) while open, in a test without the CLI's logger finder:
 * there the JDK's default finder hands the lines to java.util.logging, under the loggers' names.
 */
final class LogCapture extends Handler implements AutoCloseable {
    private final Logger root = Logger.getLogger("io.engramhost"); // held: java.util.logging keeps loggers weakly
    private final StringBuilder lines = new StringBuilder();

    LogCapture() {
        root.addHandler(this);
    }

    @Override
    public synchronized void publish(LogRecord r) {
        lines.append(r.getLevel()).append(' ').append(r.getMessage()).append('\n');
    }

    synchronized String text() {
        return lines.toString();
    }

    @Override
    public void flush() {
    }

    @Override
    public void close() {
        root.removeHandler(this);
    }
}
