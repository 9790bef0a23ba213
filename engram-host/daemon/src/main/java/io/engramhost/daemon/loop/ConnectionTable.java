package io.engramhost.daemon.loop;

import io.engramhost.os.BorrowedFd;
import io.engramhost.os.Fd;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.ConnectionPhase;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;

/**
 * Every connection of the poll loop, in accept order: accepting them (admission by uid, the connection caps and
 * eviction, docs/protocol.md), counting them per uid, and closing them, which gives back what each holds (its
 * request memory, its lease, its deadline, its socket). Used by the poll loop's thread only.
 */
final class ConnectionTable {
    private static final int ACCEPTS_PER_ROUND = 256;

    /** Writes a short answer on a socket that is about to close, if it takes it whole now (best effort). */
    interface LastWord {
        void send(Fd fd, int version, ErrorReply reply);
    }

    private final LinkedHashMap<Long, Connection> byId = new LinkedHashMap<>();
    private final Map<Integer, Integer> perUid = new HashMap<>();
    private final ConnectionLimits limits;
    private final Services services;
    private final RequestMemory memory;
    private final Deadlines deadlines;
    private final LastWord lastWord;
    private final Runnable detachAbandoned;
    private long nextId;

    ConnectionTable(ConnectionLimits limits, Services services, RequestMemory memory, Deadlines deadlines,
            LastWord lastWord, Runnable detachAbandoned) {
        this.limits = limits;
        this.services = services;
        this.memory = memory;
        this.deadlines = deadlines;
        this.lastWord = lastWord;
        this.detachAbandoned = detachAbandoned;
    }

    int size() {
        return byId.size();
    }

    /** Every connection, oldest first (a view: do not close while iterating it; see {@link #snapshot}). */
    Collection<Connection> all() {
        return byId.values();
    }

    List<Connection> snapshot() {
        return new ArrayList<>(byId.values());
    }

    boolean contains(Connection c) {
        return byId.get(c.id) == c;
    }

    /** Accepts what waits in the listening socket's backlog (at most a round's worth), admitting or refusing each. */
    void acceptPending(BorrowedFd listener, String socketName) {
        for (int i = 0; i < ACCEPTS_PER_ROUND; i++) {
            Fd fd = UnixSockets.accept(listener, "client of " + socketName, true);
            if (fd == null) {
                return;
            }
            PeerCredentials peer;
            try {
                peer = UnixSockets.peerCredentials(fd);
            } catch (RuntimeException e) {
                fd.close();
                continue;
            }
            ConnectionStats stats = services.stats();
            stats.accepted.incrementAndGet();
            if (!services.admits().test(peer.uid())) {
                stats.refusedNotAllowed.incrementAndGet();
                stats.warnOnce(peer, "not-allowed", "refused pid " + peer.pid() + ": uid " + peer.uid()
                        + " is not admitted (--allow-uid)");
                refuse(fd, ErrorReply.of(ErrorCode.NOT_ALLOWED, "uid " + peer.uid() + " is not admitted by this"
                        + " daemon; the operator can add it with --allow-uid"));
                continue;
            }
            String full = makeRoom(peer);
            if (full != null) {
                stats.refusedBusy.incrementAndGet();
                stats.warnOnce(peer, "busy", "refused pid " + peer.pid() + " (uid " + peer.uid() + "): " + full);
                refuse(fd, ErrorReply.of(ErrorCode.BUSY, full));
                continue;
            }
            add(new Connection(++nextId, fd, peer, services.clock().getAsLong()));
        }
    }

    /** Takes over connections a predecessor handed over: each becomes this table's, at rest, its lease listed again. */
    void install(List<HandedConnection> handed) {
        long now = services.clock().getAsLong();
        for (HandedConnection h : handed) {
            Connection c = new Connection(++nextId, h.fd(), h.peer(), now);
            c.phase = h.phase();
            c.version = h.version();
            c.leaseId = h.leaseId();
            add(c);
            if (c.phase == ConnectionPhase.LEASE) {
                services.leases().adopt(h.leaseId(), h.peer().pid(), h.peer().uid(), h.leaseSince());
            }
        }
    }

    private void add(Connection c) {
        byId.put(c.id, c);
        perUid.merge(c.peer.uid(), 1, Integer::sum);
        services.stats().open.incrementAndGet();
        deadlines.file(c, c.deadline(limits));
    }

    /** Frees a slot for {@code peer} by evicting, or names the limit that stays reached (null: room). */
    private String makeRoom(PeerCredentials peer) {
        int uid = peer.uid();
        if (perUid.getOrDefault(uid, 0) >= limits.maxPerUid() && !evictOldest(c -> c.peer.uid() == uid, "uid " + uid
                + " has " + limits.maxPerUid() + " connections, the limit (--max-connections-per-uid)")) {
            return "uid " + uid + " has " + limits.maxPerUid() + " connections open, the limit"
                    + " (--max-connections-per-uid " + limits.maxPerUid() + "), and none can be evicted";
        }
        if (byId.size() >= limits.maxConnections() && !evictOldest(c -> true, "the daemon has "
                + limits.maxConnections() + " connections, the limit (--max-connections)")) {
            return "the daemon has " + limits.maxConnections() + " connections open, the limit"
                    + " (--max-connections " + limits.maxConnections() + "), and none can be evicted";
        }
        return null;
    }

    /**
     * Evicts, in scope, the oldest connection without a complete HELLO, else the oldest session at rest. Leases and
     * connections with a request under way are never evicted.
     */
    private boolean evictOldest(Predicate<Connection> scope, String why) {
        Connection victim = oldest(c -> scope.test(c) && c.phase == ConnectionPhase.HELLO && !c.busy && c.out == null);
        if (victim == null) {
            victim = oldest(c -> scope.test(c) && c.phase == ConnectionPhase.SESSION && c.atRest());
        }
        if (victim == null) {
            return false;
        }
        services.stats().evicted.incrementAndGet();
        services.stats().warnOnce(victim.peer, "evicted", "evicted " + victim + ": " + why);
        if (victim.out == null) {
            lastWord.send(victim.fd, victim.frameVersion(), ErrorReply.of(ErrorCode.BUSY, "evicted: " + why
                    + ", and this connection was the oldest"
                    + (victim.phase == ConnectionPhase.HELLO ? " without a HELLO" : " at rest")));
        }
        close(victim, null);
        return true;
    }

    private Connection oldest(Predicate<Connection> which) {
        for (Connection c : byId.values()) {
            if (which.test(c)) {
                return c;
            }
        }
        return null;
    }

    private void refuse(Fd fd, ErrorReply reply) {
        try {
            lastWord.send(fd, 1, reply);
        } finally {
            fd.close();
        }
    }

    /** Takes {@code c} out of the table without closing its socket (a takeover's connection leaves the loop). */
    void detach(Connection c) {
        if (remove(c) && !c.busy) {
            c.inbound.release(memory, c);
        }
    }

    /**
     * Closes one connection and gives back what it holds; {@code leaseEnd} says why, for a lease's log line. A
     * connection already closed is left alone.
     */
    void close(Connection c, String leaseEnd) {
        if (!remove(c)) {
            return;
        }
        if (!c.busy) {
            c.inbound.release(memory, c);
        }
        if (c.phase == ConnectionPhase.LEASE) {
            services.leases().end(c.leaseId, leaseEnd == null ? "ended by the daemon" : leaseEnd);
        }
        if (c.afterOut == Answer.Next.DETACH) {
            detachAbandoned.run(); // a TAKEOVER granted, but its connection closed before it began
        }
        Runnable then = c.onWritten;
        c.onWritten = null;
        if (then != null) {
            then.run();
        }
        c.fd.close();
    }

    /**
     * After a committed handover: every connection leaves without a word (the successor holds each socket too, so a
     * client sees nothing), each lease logged as handed over.
     */
    void closeHandedOver(int successor) {
        for (Connection c : snapshot()) {
            remove(c);
            if (c.phase == ConnectionPhase.LEASE) {
                services.leases().end(c.leaseId, "handed over to pid " + successor);
            }
            c.fd.close();
        }
    }

    private boolean remove(Connection c) {
        if (byId.remove(c.id) == null) {
            return false;
        }
        perUid.computeIfPresent(c.peer.uid(), (k, v) -> v == 1 ? null : v - 1);
        services.stats().open.decrementAndGet();
        deadlines.remove(c);
        return true;
    }
}
