package io.engramhost.cli;

import io.engramhost.util.Bytes;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.LongSupplier;

/**
 * Progress of a long command on standard error: on a terminal a live line, redrawn four times a second and
 * ended when the work is; otherwise one line every {@code intervalMillis} ("verify: 42% (1.2 GiB of 2.9 GiB),
 * 1.50 GB/s, about 2 s left"), and a last one at the end if any was printed.
 */
final class ProgressLine implements AutoCloseable {
    private static final long TTY_MILLIS = 250;
    private final String what;
    private final long total;
    private final LongSupplier done;
    private final boolean tty;
    private final PrintStream err = System.err;
    private final long t0 = System.nanoTime();
    private final Thread thread;
    private volatile boolean printed;

    private ProgressLine(String what, long total, LongSupplier done, long intervalMillis, boolean tty) {
        this.what = what;
        this.total = total;
        this.done = done;
        this.tty = tty;
        long every = tty ? TTY_MILLIS : Math.max(1, intervalMillis);
        this.thread = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(every);
                    print(false);
                }
            } catch (InterruptedException finished) {
                // close() ends the line
            }
        }, "engram-progress-line");
        thread.setDaemon(true);
    }

    /** Starts reporting {@code done} (out of {@code total}) until closed. */
    static ProgressLine start(String what, long total, LongSupplier done, long intervalMillis) {
        ProgressLine p = new ProgressLine(what, total, done, intervalMillis, stderrIsTerminal());
        p.thread.start();
        return p;
    }

    /** True when fd 2 is a terminal (a tty or pseudo-terminal device). */
    static boolean stderrIsTerminal() {
        try {
            String target = Files.readSymbolicLink(Path.of("/proc/self/fd/2")).toString();
            return target.startsWith("/dev/pts/") || target.startsWith("/dev/tty") || target.equals("/dev/console");
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            return false;
        }
    }

    private synchronized void print(boolean last) {
        long d = Math.min(done.getAsLong(), total);
        double seconds = (System.nanoTime() - t0) / 1e9;
        double rate = seconds > 0 ? d / seconds : 0;
        String left = last || d >= total ? "" : rate > 0 ? String.format(", about %.0f s left", (total - d) / rate) : "";
        String line = String.format("%s: %3d%% (%s of %s), %.2f GB/s%s%s", what, total == 0 ? 100 : (int) (100 * d / total),
                Bytes.format(d), Bytes.format(total), rate / 1e9, left, last ? String.format(", %.1f s", seconds) : "");
        if (tty) {
            err.print("\r\033[K" + line + (last ? "\n" : ""));
        } else {
            err.println(line);
        }
        err.flush();
        printed = true;
    }

    @Override
    public void close() {
        thread.interrupt();
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (tty || printed) {
            print(true);
        }
    }
}
