package io.engramhost.cli;

import io.engramhost.cli.log.Console;
import io.engramhost.store.LoadProgress;
import io.engramhost.util.Bytes;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * Progress of a long command on standard error: on a terminal a live line, redrawn four times a second and
 * ended when the work is; otherwise one line every {@code intervalMillis} ("verify: 42% (1.2 GiB of 2.9 GiB),
 * 1.50 GB/s, about 2 s left"), and a last one at the end if any was printed.
 *
 * <p>The work may go through phases ({@link #forLoad}): the line names the phase, its rate and time left
 * count from the phase's start, and a line is ended with a newline when its phase ends. A log line written
 * meanwhile ({@link Console}) first ends the live line, so the two never share a terminal line.
 */
final class ProgressLine implements AutoCloseable {
    private static final long TTY_MILLIS = 250;

    /** What the line shows: {@code what} at {@code done} of {@code total} bytes, counted since {@code startNanos}. */
    record View(String what, long done, long total, long startNanos) {
    }

    private final Supplier<View> view;
    private final boolean tty;
    private final boolean gib;
    private final PrintStream err = System.err;
    private final Thread thread;
    private volatile boolean printed;
    /** The phase the live line on screen shows, or null when none is drawn (guarded by Console.lock()). */
    private String drawn;

    private ProgressLine(Supplier<View> view, long intervalMillis, boolean tty, boolean gib) {
        this.view = view;
        this.tty = tty;
        this.gib = gib;
        long every = tty ? TTY_MILLIS : Math.max(1, intervalMillis);
        this.thread = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(every);
                    tick();
                }
            } catch (InterruptedException finished) {
                // close() ends the line
            }
        }, "engram-progress-line");
        thread.setDaemon(true);
    }

    /** Starts reporting {@code done} (out of {@code total}) until closed. */
    static ProgressLine start(String what, long total, LongSupplier done, long intervalMillis) {
        long t0 = System.nanoTime();
        ProgressLine p = new ProgressLine(() -> new View(what, done.getAsLong(), total, t0), intervalMillis,
                stderrIsTerminal(), false);
        p.thread.start();
        return p;
    }

    /**
     * On a terminal, a live line for a daemon's load: the phase ({@code create}, {@code read}...), bytes done of
     * total, percent, GiB/s and time left, for phases counted in bytes. Null when standard error is not a
     * terminal: the daemon then logs its progress every few seconds instead.
     */
    static ProgressLine forLoad(LoadProgress progress) {
        if (!stderrIsTerminal()) {
            return null;
        }
        ProgressLine p = new ProgressLine(() -> {
            LoadProgress.Snapshot s = progress.snapshot();
            return new View(s.phase(), s.done(), s.total(), s.phaseStartNanos());
        }, TTY_MILLIS, true, true);
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

    /** The line's text: "read:  42% (1.2 GiB of 2.9 GiB), 1.50 GiB/s, about 2 s left". */
    static String text(View v, boolean last, boolean gib) {
        long total = v.total();
        long d = Math.min(v.done(), total);
        double seconds = (System.nanoTime() - v.startNanos()) / 1e9;
        double rate = seconds > 0 ? d / seconds : 0;
        String left = last || d >= total ? "" : rate > 0 ? String.format(Locale.ROOT, ", about %.0f s left",
                (total - d) / rate) : "";
        return String.format(Locale.ROOT, "%s: %3d%% (%s of %s), %.2f %s%s%s", v.what(),
                total == 0 ? 100 : (int) (100 * d / total), Bytes.format(d), Bytes.format(total),
                rate / (gib ? Bytes.GiB : 1e9), gib ? "GiB/s" : "GB/s", left,
                last ? String.format(Locale.ROOT, ", %.1f s", seconds) : "");
    }

    private void tick() {
        synchronized (Console.lock()) {
            View v = view.get();
            if (!tty) {
                err.println(text(v, false, gib));
                err.flush();
                printed = true;
                return;
            }
            if (drawn != null && !drawn.equals(v.what())) {
                err.print("\n"); // its phase ended: the line stays as last drawn
                drawn = null;
                Console.liveLine(null);
            }
            if (v.total() > 0) {
                draw(v, false);
            }
        }
    }

    /** Draws the live line (holding Console.lock()); {@code end}: with its final figures and a newline. */
    private void draw(View v, boolean end) {
        err.print("\r\033[K" + text(v, end, gib) + (end ? "\n" : ""));
        err.flush();
        printed = true;
        drawn = end ? null : v.what();
        Console.liveLine(end ? null : this::endLine);
    }

    /** A log line is coming: end the live line where it stands (Console calls it holding its lock). */
    private void endLine() {
        if (drawn != null) {
            View v = view.get();
            if (v.what().equals(drawn)) {
                draw(v, true);
            } else {
                err.print("\n"); // its phase already ended: the line stays as last drawn
                err.flush();
                drawn = null;
                Console.liveLine(null);
            }
        }
    }

    @Override
    public void close() {
        thread.interrupt();
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        synchronized (Console.lock()) {
            if (!tty) {
                if (printed) {
                    err.println(text(view.get(), true, gib));
                    err.flush();
                }
            } else if (drawn != null) {
                endLine();
            } else if (!gib) {
                draw(view.get(), true); // verify ends with its summary line, as always
            }
        }
    }
}
