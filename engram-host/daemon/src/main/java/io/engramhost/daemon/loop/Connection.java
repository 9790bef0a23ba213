package io.engramhost.daemon.loop;

import io.engramhost.os.Fd;
import io.engramhost.os.PeerCredentials;
import io.engramhost.protocol.ConnectionPhase;

/**
 * One peer's connection, as the poll loop sees it. Only the loop's thread changes it; a worker
 * gets the fields it needs when the loop hands it a request, and hands its answer back through the
 * loop's completion queue.
 */
final class Connection {
    final long id;
    final Fd fd;
    final PeerCredentials peer;
    final long acceptedNanos;
    final Inbound inbound = new Inbound();
    ConnectionPhase phase = ConnectionPhase.HELLO;
    /** The chosen protocol version, once HELLO is answered. */
    int version = 1;
    /** A worker has this connection's request; nothing more is read until its answer is written. */
    boolean busy;
    /** A read is waiting for request memory. */
    boolean starved;
    Outbound out;
    long outSinceNanos;
    /** What to do once {@link #out} is written: go on, become a lease, or close. */
    Answer.Next afterOut = Answer.Next.SESSION;
    Runnable onWritten;
    long lastActivityNanos;
    /** The lease's id once it is one. */
    long leaseId;
    /** Where {@link Deadlines} has it: the deadline it is filed under, and which filing counts. */
    long filedDeadline = Long.MAX_VALUE;
    int filing;

    Connection(long id, Fd fd, PeerCredentials peer, long nowNanos) {
        this.id = id;
        this.fd = fd;
        this.peer = peer;
        this.acceptedNanos = nowNanos;
        this.lastActivityNanos = nowNanos;
    }

    /** Evictable when the limits are reached: no HELLO yet, or a session at rest. Leases never are. */
    boolean atRest() {
        return phase != ConnectionPhase.LEASE && !busy && out == null && inbound.idle();
    }

    /** Nothing under way: no request read in part or being answered, no answer being written, no wait for memory. */
    boolean quiet() {
        return !busy && out == null && inbound.idle() && !starved;
    }

    /** The protocol version of the next message on this connection (HELLO's answer is in version 1). */
    int frameVersion() {
        return phase.frameVersion(version);
    }

    /** The moment this connection misses its deadline (Long.MAX_VALUE: none). */
    long deadline(ConnectionLimits limits) {
        if (busy) {
            return Long.MAX_VALUE;
        }
        if (out != null) {
            return outSinceNanos + limits.requestTimeoutMillis() * 1_000_000L;
        }
        return switch (phase) {
            case HELLO -> acceptedNanos + limits.helloTimeoutMillis() * 1_000_000L;
            case SESSION -> inbound.idle() ? lastActivityNanos + limits.idleTimeoutMillis() * 1_000_000L
                    : inbound.startedNanos() + limits.requestTimeoutMillis() * 1_000_000L;
            // a lease waits for BYE for as long as it lives, but a message begun on it must end in time
            case LEASE -> inbound.idle() ? Long.MAX_VALUE
                    : inbound.startedNanos() + limits.requestTimeoutMillis() * 1_000_000L;
        };
    }

    /** Which deadline it is, for the TIMED_OUT message. */
    String deadlineName(ConnectionLimits limits) {
        if (out != null) {
            return "the answer was not taken within " + limits.requestTimeoutMillis() + " ms (--request-timeout-ms)";
        }
        return switch (phase) {
            case HELLO -> "no complete HELLO within " + limits.helloTimeoutMillis() + " ms of connecting (--hello-timeout-ms)";
            case SESSION -> inbound.idle() ? "no request for " + limits.idleTimeoutMillis() + " ms (--idle-timeout-ms)"
                    : "a request not complete within " + limits.requestTimeoutMillis() + " ms of its first byte"
                            + " (--request-timeout-ms)";
            case LEASE -> "a message on a lease not complete within " + limits.requestTimeoutMillis()
                    + " ms of its first byte (--request-timeout-ms)";
        };
    }

    @Override
    public String toString() {
        return "connection " + id + " of pid " + peer.pid() + " (uid " + peer.uid() + ")";
    }
}
