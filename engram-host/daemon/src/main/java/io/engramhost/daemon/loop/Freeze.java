package io.engramhost.daemon.loop;

import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The poll loop's part in a handover. RUNNING serves everything. A handover first DRAINS (the listener and every
 * connection at rest are left alone while the others finish what is under way), then FREEZES (nothing is polled but
 * the wakeup), until it commits or fails ({@link #resume}). {@link #begin} comes from the handover's thread; the
 * rest runs on the loop's.
 */
final class Freeze {
    enum Mode { RUNNING, DRAINING, FROZEN }

    private volatile Mode mode = Mode.RUNNING;
    private volatile long drainDeadline;
    private volatile CompletableFuture<List<HandedConnection>> frozen;

    /** Starts draining: what is under way gets until {@code deadlineNanos}; the future gets every connection. */
    CompletableFuture<List<HandedConnection>> begin(long deadlineNanos) {
        CompletableFuture<List<HandedConnection>> f = new CompletableFuture<>();
        frozen = f;
        drainDeadline = deadlineNanos;
        mode = Mode.DRAINING;
        return f;
    }

    /** After a failed handover: everything is served again. */
    void resume() {
        mode = Mode.RUNNING;
    }

    Mode mode() {
        return mode;
    }

    /** Whether the loop polls {@code c} now: not while frozen, nor a connection at rest while draining. */
    boolean polls(Connection c) {
        Mode m = mode;
        return m == Mode.RUNNING || m == Mode.DRAINING && !c.quiet();
    }

    /**
     * While draining: once every connection is at rest (or the drain's time is up, when those still busy are closed
     * with TIMED_OUT), freezes and hands the list of connections to the future. Their sockets stay the table's.
     */
    void step(long now, ConnectionTable table, ConnectionTable.LastWord lastWord, Leases leases) {
        if (mode != Mode.DRAINING) {
            return;
        }
        boolean late = now >= drainDeadline;
        for (Connection c : table.snapshot()) {
            if (!c.quiet()) {
                if (!late) {
                    return;
                }
                if (c.out == null) {
                    lastWord.send(c.fd, c.frameVersion(), ErrorReply.of(ErrorCode.TIMED_OUT, "the daemon is handing"
                            + " over to its successor and this connection's request was still under way; connect"
                            + " again"));
                }
                table.close(c, null);
            }
        }
        List<HandedConnection> out = new ArrayList<>(table.size());
        for (Connection c : table.all()) {
            Leases.Lease l = c.leaseId > 0 ? leases.get(c.leaseId) : null;
            out.add(new HandedConnection(c.fd, c.phase, c.version, c.peer, l == null ? 0 : l.id(),
                    l == null ? Instant.EPOCH : l.since()));
        }
        mode = Mode.FROZEN;
        frozen.complete(out);
    }
}
