package io.engramhost.cli.log;

import java.io.PrintStream;

/**
 * Standard error shared by log lines and a live progress line: one lock for both, and a log line that
 * arrives while a live line is drawn first ends that line (the live line's owner redraws it with a
 * newline), so the two never mix on one terminal line.
 */
public final class Console {
    private static final Object LOCK = new Object();
    private static Runnable liveLineEnder;

    private Console() {
    }

    /** The lock a live line holds while it draws. */
    public static Object lock() {
        return LOCK;
    }

    /** A live line is drawn ({@code ender} ends it with a newline), or none is (null). Call holding {@link #lock()}. */
    public static void liveLine(Runnable ender) {
        liveLineEnder = ender;
    }

    /** Writes one line to {@code out}, ending the live line first when {@code out} is where it is drawn. */
    static void println(PrintStream out, String line) {
        synchronized (LOCK) {
            if (liveLineEnder != null && out == System.err) {
                Runnable ender = liveLineEnder;
                liveLineEnder = null;
                ender.run();
            }
            out.println(line);
            out.flush();
        }
    }
}
