package io.engramhost.seed;

import static java.lang.System.Logger.Level.WARNING;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Warnings of what peers do, at most {@code perMinute} lines in a clock minute (the rest only counted, by the caller's
 * metrics): a peer that fails on purpose again and again cannot fill the log.
 */
final class RateLimitedLog {
    private final System.Logger log;
    private final int perMinute;
    private final AtomicLong minute = new AtomicLong(-1);
    private final AtomicInteger logged = new AtomicInteger();

    RateLimitedLog(System.Logger log, int perMinute) {
        this.log = log;
        this.perMinute = perMinute;
    }

    /** Logs {@code line} as a warning unless {@code perMinute} were logged this minute already. */
    void warn(String line) {
        long now = System.nanoTime() / 60_000_000_000L;
        if (minute.getAndSet(now) != now) {
            logged.set(0);
        }
        if (logged.incrementAndGet() <= perMinute) {
            log.log(WARNING, line);
        }
    }
}
