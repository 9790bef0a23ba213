package io.engramhost.bench;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Predicate;

/**
 * One client process of {@link RestartBench}. Its stdout is read on the benchmark thread up to the ready line (no
 * hand-off in the timed path) and drained to its end afterwards; its stderr goes to a file, so a chatty child never
 * blocks and its tail can be quoted. A watchdog kills it (and anything it started) past the time limit.
 */
final class ClientProcess {
    private static final int TAIL_LINES = 20;
    private static final int TAIL_BYTES = 4096;
    private static final long KILL_WAIT_SECONDS = 30;

    final String what;
    final String label;
    final List<String> command;
    final AtomicBoolean killed = new AtomicBoolean();
    private final Process process;
    private final Path stderr;
    private final BufferedReader out;
    private final Deque<String> lastLines = new ArrayDeque<>();
    private ScheduledFuture<?> kill;
    String readyLine;

    private ClientProcess(String what, String label, List<String> command, Process process, Path stderr) {
        this.what = what;
        this.label = label;
        this.command = List.copyOf(command);
        this.process = process;
        this.stderr = stderr;
        this.out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    }

    /** Starts {@code command} with this JVM's environment plus {@code environment}. */
    static ClientProcess start(String what, String label, List<String> command, Map<String, String> environment,
            Path stderr, ScheduledThreadPoolExecutor watchdog, long timeoutMillis) {
        return start(what, label, command, environment, stderr, watchdog, timeoutMillis, false);
    }

    /** With {@code stdin}, the child's stdin is a pipe that {@link #go} writes to; else /dev/null. */
    static ClientProcess start(String what, String label, List<String> command, Map<String, String> environment,
            Path stderr, ScheduledThreadPoolExecutor watchdog, long timeoutMillis, boolean stdin) {
        ProcessBuilder pb = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.to(stderr.toFile()));
        pb.redirectInput(stdin ? ProcessBuilder.Redirect.PIPE : ProcessBuilder.Redirect.from(new File("/dev/null")));
        pb.environment().putAll(environment);
        Process p;
        try {
            p = pb.start();
        } catch (IOException e) {
            throw new IllegalStateException("cannot start " + what + ": " + String.join(" ", command) + ": "
                    + e.getMessage(), e);
        }
        ClientProcess c = new ClientProcess(what, label, command, p, stderr);
        try {
            c.arm(watchdog, timeoutMillis);
        } catch (RuntimeException e) {
            c.destroy();
            throw e;
        }
        return c;
    }

    /** The watchdog only kills: the pipe then ends, and the thread reading it sees why in {@link #killed}. */
    private void arm(ScheduledThreadPoolExecutor watchdog, long timeoutMillis) {
        kill = watchdog.schedule(() -> {
            killed.set(true);
            kill();
        }, timeoutMillis, TimeUnit.MILLISECONDS);
    }

    private void kill() {
        if (process.isAlive()) {
            process.descendants().forEach(ProcessHandle::destroyForcibly);
            process.destroyForcibly();
        }
    }

    /** Reads stdout up to the first line {@code ready} accepts and returns it; throws if the child ends first. */
    String awaitReady(Predicate<String> ready, long timeoutMillis) {
        try {
            for (String line; (line = out.readLine()) != null;) {
                remember(line);
                if (ready.test(line)) {
                    kill.cancel(false);
                    readyLine = line;
                    return line;
                }
            }
        } catch (IOException e) {
            throw failure("could not be read: " + e.getMessage());
        }
        if (killed.get()) {
            throw failure("did not print its ready line within " + timeoutMillis + " ms and was killed");
        }
        return failWithStatus();
    }

    /**
     * Writes the go line on the child's stdin (a child started with a pipe, waiting after its first ready line),
     * re-arms the time limit, and reads stdout up to the line {@code ready} accepts.
     */
    String go(Predicate<String> ready, long timeoutMillis, ScheduledThreadPoolExecutor watchdog) {
        arm(watchdog, timeoutMillis);
        try {
            process.getOutputStream().write("go\n".getBytes(StandardCharsets.US_ASCII));
            process.getOutputStream().flush();
        } catch (IOException e) {
            throw failure("could not be told to go: " + e.getMessage());
        }
        return awaitReady(ready, timeoutMillis);
    }

    private String failWithStatus() {
        kill.cancel(false);
        try {
            if (!process.waitFor(KILL_WAIT_SECONDS, TimeUnit.SECONDS)) {
                throw failure("closed its stdout without its ready line and did not exit; killed");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw failure("interrupted while waiting for it to exit");
        }
        throw failure("ended with exit status " + process.exitValue() + " before its ready line");
    }

    /** Drains stdout to its end and waits for the exit, killing the child past the time limit; its status. */
    int finish(ScheduledThreadPoolExecutor watchdog, long timeoutMillis) {
        arm(watchdog, timeoutMillis);
        try {
            for (String line; (line = out.readLine()) != null;) {
                remember(line);
            }
            return process.waitFor();
        } catch (IOException e) {
            throw failure("could not be read to its end: " + e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw failure("interrupted while waiting for it to exit");
        } finally {
            kill.cancel(false);
        }
    }

    /** Kills the child and whatever it started, waits for it, and closes its stdout. Idempotent. */
    void destroy() {
        try {
            kill();
            if (!process.waitFor(KILL_WAIT_SECONDS, TimeUnit.SECONDS)) {
                throw new IllegalStateException(what + " (pid " + process.pid() + ") survived SIGKILL for "
                        + KILL_WAIT_SECONDS + " s: " + String.join(" ", command));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            try {
                out.close();
            } catch (IOException ignored) {
                // the pipe is gone with the process
            }
        }
    }

    private synchronized void remember(String line) {
        lastLines.addLast(line);
        if (lastLines.size() > TAIL_LINES) {
            lastLines.removeFirst();
        }
    }

    /** An exception naming the child, its command, its last stdout lines and the tail of its stderr. */
    IllegalStateException failure(String what) {
        StringBuilder m = new StringBuilder(this.what).append(' ').append(what).append(": ")
                .append(String.join(" ", command));
        synchronized (this) {
            if (!lastLines.isEmpty()) {
                m.append("\n  last stdout lines:\n    ").append(String.join("\n    ", lastLines));
            }
        }
        String err = stderrTail();
        m.append(err.isEmpty() ? "\n  stderr: (empty)" : "\n  stderr tail:\n    " + err.strip().replace("\n", "\n    "));
        return new IllegalStateException(m.toString());
    }

    private String stderrTail() {
        try (RandomAccessFile f = new RandomAccessFile(stderr.toFile(), "r")) {
            long from = Math.max(0, f.length() - TAIL_BYTES);
            byte[] b = new byte[(int) (f.length() - from)];
            f.seek(from);
            f.readFully(b);
            String s = new String(b, StandardCharsets.UTF_8);
            List<String> lines = List.of(s.split("\n"));
            return String.join("\n", lines.subList(Math.max(0, lines.size() - TAIL_LINES), lines.size()));
        } catch (IOException e) {
            return "(unreadable: " + e.getMessage() + ")";
        }
    }
}
