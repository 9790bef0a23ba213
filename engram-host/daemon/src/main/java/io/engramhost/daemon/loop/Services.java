package io.engramhost.daemon.loop;

import io.engramhost.util.Threads;
import java.util.function.IntPredicate;
import java.util.function.LongSupplier;

/**
 * What the session loop and the request handler use of the daemon that runs them: which uids it admits and which
 * may stop it, its leases and counters, the threads it starts (whose death by an error takes the daemon down, through
 * {@code fatal}), and the clock they read. Tests make one of their own to drive a loop.
 *
 * @param clock nanoseconds, as {@link System#nanoTime}
 */
public record Services(IntPredicate admits, IntPredicate mayStop, Leases leases, ConnectionStats stats, Threads threads,
        Thread.UncaughtExceptionHandler fatal, LongSupplier clock) {
}
