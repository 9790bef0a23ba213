package io.engramhost.daemon;

import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.os.BorrowedFd;
import io.engramhost.os.Fd;
import io.engramhost.os.NonBlocking;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/**
 * Every connection of the daemon, served from one thread with poll(2): accepting, reading requests
 * as their bytes arrive, writing answers as the sockets take them, and enforcing the limits and
 * deadlines of docs/protocol.md. A quiet, slow or flooding peer costs a slot in the poll set and at
 * most its share of request memory, never a thread. Complete requests go to a few workers
 * ({@link Requests}); their answers come back through a queue and an eventfd.
 */
final class SessionLoop implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(SessionLoop.class.getName());
    private static final int SCRATCH_BYTES = 256 << 10;
    private static final int ACCEPTS_PER_ROUND = 256;
    private static final int SLOT_WAKEUP = 0;
    private static final int SLOT_LISTENER = 1;

    private record Completion(Connection connection, Requests.Answer answer, long reserved) {
    }

    /**
     * RUNNING serves everything. A handover first DRAINS (the listener and every connection at rest are left
     * alone while the others finish what is under way), then FREEZES (nothing is polled but the wakeup), until
     * it commits ({@link #closeHandedOver}) or fails ({@link #resume}).
     */
    private enum Mode { RUNNING, DRAINING, FROZEN }

    /** A connection as it is handed over: its socket (still owned by this loop) and its state. */
    record Quiet(Fd fd, Connection.Phase phase, int version, PeerCredentials peer, long leaseId) {
    }

    private final Daemon daemon;
    private final ConnectionLimits limits;
    private final int listenFd;
    private final BorrowedFd listener;
    private final String socketName;
    private final Requests requests;
    private final NonBlocking.Wakeup wakeup = new NonBlocking.Wakeup("engram-host poll loop wakeup");
    private final NonBlocking.PollSet pollSet = new NonBlocking.PollSet(64);
    private final NonBlocking.Scratch scratch = new NonBlocking.Scratch(SCRATCH_BYTES);
    /** In accept order, so the oldest come first. */
    private final LinkedHashMap<Long, Connection> connections = new LinkedHashMap<>();
    private final Map<Integer, Integer> perUid = new HashMap<>();
    private final ConcurrentLinkedQueue<Completion> completions = new ConcurrentLinkedQueue<>();
    private final ExecutorService workers;
    private final RequestMemory memory;
    private final Thread thread;
    private volatile boolean running = true;
    private volatile Mode mode = Mode.RUNNING;
    private volatile long drainDeadline;
    private volatile java.util.concurrent.CompletableFuture<List<Quiet>> frozen;
    private volatile long heartbeat = System.nanoTime();
    private long nextId;
    private Connection[] polled = new Connection[0];

    SessionLoop(Daemon daemon, ConnectionLimits limits, int listenFd, String socketName) {
        this.daemon = daemon;
        this.limits = limits;
        this.listenFd = listenFd;
        this.listener = BorrowedFd.of(listenFd, "listening socket " + socketName);
        this.socketName = socketName;
        this.requests = new Requests(daemon);
        this.memory = new RequestMemory(limits.requestMemory());
        this.workers = Executors.newFixedThreadPool(limits.workers(), r -> daemon.thread(r, "engram-worker"));
        this.thread = daemon.thread(this::run, "engram-sessions");
    }

    void start() {
        thread.start();
    }

    long requestMemoryUsed() {
        return memory.used();
    }

    /** When the loop last went round (System.nanoTime); it does at least once a second (timeoutMillis). */
    long heartbeatNanos() {
        return heartbeat;
    }

    private void run() {
        while (running) {
            long now = System.nanoTime();
            heartbeat = now;
            int n = fillPollSet();
            pollSet.poll(n, timeoutMillis(now));
            if (!running) {
                break;
            }
            if (pollSet.revents(SLOT_WAKEUP) != 0) {
                wakeup.drain();
            }
            drainCompletions();
            if (mode == Mode.FROZEN) {
                continue;
            }
            for (int slot = 2; slot < n; slot++) {
                Connection c = polled[slot];
                int revents = pollSet.revents(slot);
                if (revents != 0 && connections.get(c.id) == c) {
                    serve(c, revents);
                }
            }
            if (mode == Mode.RUNNING && pollSet.revents(SLOT_LISTENER) != 0) {
                acceptPending();
            }
            expire(System.nanoTime());
            if (mode == Mode.DRAINING) {
                drainStep(System.nanoTime());
            }
        }
    }

    // ------------------------------------------------------------------------------------ handover

    /**
     * Stops accepting and reading new requests, lets what is under way finish (at most {@code timeoutMillis};
     * what is still under way then is closed with TIMED_OUT), then freezes: the future gets every connection,
     * all at rest. The loop's connections stay its own until {@link #closeHandedOver} or {@link #resume}.
     */
    java.util.concurrent.CompletableFuture<List<Quiet>> freeze(long timeoutMillis) {
        java.util.concurrent.CompletableFuture<List<Quiet>> f = new java.util.concurrent.CompletableFuture<>();
        frozen = f;
        drainDeadline = System.nanoTime() + timeoutMillis * 1_000_000L;
        mode = Mode.DRAINING;
        wakeup.signal();
        return f;
    }

    /** After a failed handover: serves again, accepting first what waited in the backlog. */
    void resume() {
        mode = Mode.RUNNING;
        wakeup.signal();
    }

    private static boolean quiet(Connection c) {
        return !c.busy && c.out == null && c.inbound.idle() && !c.starved;
    }

    private void drainStep(long now) {
        boolean late = now >= drainDeadline;
        for (Connection c : new ArrayList<>(connections.values())) {
            if (!quiet(c)) {
                if (!late) {
                    return;
                }
                sendNow(c, ErrorReply.of(ErrorCode.TIMED_OUT, "the daemon is handing over to its successor and this"
                        + " connection's request was still under way; connect again"));
                close(c, null);
            }
        }
        List<Quiet> out = new ArrayList<>(connections.size());
        for (Connection c : connections.values()) {
            out.add(new Quiet(c.fd, c.phase, c.version, c.peer, c.leaseId));
        }
        mode = Mode.FROZEN;
        frozen.complete(out);
    }

    /**
     * Installs connections handed over by a predecessor (before {@link #start}): each becomes this loop's, at
     * rest, in the phase it had, leases listed again under their ids.
     */
    void install(List<Quiet> handedOver, java.util.function.LongFunction<java.time.Instant> since) {
        for (Quiet q : handedOver) {
            Connection c = new Connection(++nextId, q.fd(), q.peer(), System.nanoTime());
            c.phase = q.phase();
            c.version = q.version();
            c.leaseId = q.leaseId();
            connections.put(c.id, c);
            perUid.merge(q.peer().uid(), 1, Integer::sum);
            daemon.stats().open.incrementAndGet();
            if (c.phase == Connection.Phase.LEASE) {
                daemon.leases().adopt(q.leaseId(), q.peer().pid(), q.peer().uid(), since.apply(q.leaseId()));
            }
        }
    }

    /**
     * The handover committed: the loop stops, and its sockets are closed without a word, since the successor
     * holds each of them too (a client sees nothing); leases are logged as handed over.
     */
    void closeHandedOver(int successor) {
        if (!stopThreads()) {
            return;
        }
        for (Connection c : new ArrayList<>(connections.values())) {
            connections.remove(c.id);
            daemon.stats().open.decrementAndGet();
            if (c.phase == Connection.Phase.LEASE) {
                daemon.leases().end(c.leaseId, "handed over to pid " + successor);
            }
            c.fd.close();
        }
        wakeup.close();
    }

    private int fillPollSet() {
        int n = 2 + connections.size();
        if (polled.length < n) {
            polled = new Connection[Math.max(n, polled.length * 2)];
        }
        Mode m = mode;
        pollSet.set(SLOT_WAKEUP, wakeup.fd(), Posix.POLLIN);
        pollSet.set(SLOT_LISTENER, m == Mode.RUNNING ? listenFd : -1, Posix.POLLIN);
        if (m == Mode.FROZEN) {
            return 2;
        }
        int slot = 2;
        for (Connection c : connections.values()) {
            if (m == Mode.DRAINING && quiet(c)) {
                continue; // at rest: left for the successor, which will read what it sends next
            }
            int events = 0;
            if (c.out != null) {
                events |= Posix.POLLOUT;
            } else if (!c.busy && !c.starved) {
                events |= Posix.POLLIN;
            }
            polled[slot] = c;
            pollSet.set(slot++, c.fd.get(), events);
        }
        return slot;
    }

    private int timeoutMillis(long now) {
        long next = Long.MAX_VALUE;
        for (Connection c : connections.values()) {
            next = Math.min(next, c.deadline(limits));
        }
        if (next == Long.MAX_VALUE) {
            return 1000;
        }
        return (int) Math.max(0, Math.min(1000, (next - now + 999_999) / 1_000_000));
    }

    // ------------------------------------------------------------------------------------ accepting

    private void acceptPending() {
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
            daemon.stats().accepted.incrementAndGet();
            if (!daemon.context().admits(peer.uid())) {
                daemon.stats().refusedNotAllowed.incrementAndGet();
                daemon.stats().warnOnce(peer, "not-allowed", "refused pid " + peer.pid() + ": uid " + peer.uid()
                        + " is not admitted (--allow-uid)");
                refuse(fd, ErrorCode.NOT_ALLOWED, "uid " + peer.uid() + " is not admitted by this daemon;"
                        + " the operator can add it with --allow-uid");
                continue;
            }
            String full = makeRoom(peer);
            if (full != null) {
                daemon.stats().refusedBusy.incrementAndGet();
                daemon.stats().warnOnce(peer, "busy", "refused pid " + peer.pid() + " (uid " + peer.uid() + "): " + full);
                refuse(fd, ErrorCode.BUSY, full);
                continue;
            }
            Connection c = new Connection(++nextId, fd, peer, System.nanoTime());
            connections.put(c.id, c);
            perUid.merge(peer.uid(), 1, Integer::sum);
            daemon.stats().open.incrementAndGet();
        }
    }

    /** Frees a slot for {@code peer} by evicting, or names the limit that stays reached (null: room). */
    private String makeRoom(PeerCredentials peer) {
        int uid = peer.uid();
        if (perUid.getOrDefault(uid, 0) >= limits.maxPerUid()) {
            if (!evictOldest(c -> c.peer.uid() == uid, "uid " + uid + " has " + limits.maxPerUid()
                    + " connections, the limit (--max-connections-per-uid)")) {
                return "uid " + uid + " has " + limits.maxPerUid() + " connections open, the limit"
                        + " (--max-connections-per-uid " + limits.maxPerUid() + "), and none can be evicted";
            }
        }
        if (connections.size() >= limits.maxConnections()) {
            if (!evictOldest(c -> true, "the daemon has " + limits.maxConnections()
                    + " connections, the limit (--max-connections)")) {
                return "the daemon has " + limits.maxConnections() + " connections open, the limit"
                        + " (--max-connections " + limits.maxConnections() + "), and none can be evicted";
            }
        }
        return null;
    }

    /**
     * Evicts, in scope, the oldest connection without a complete HELLO, else the oldest session at
     * rest. Leases and connections with a request under way are never evicted.
     */
    private boolean evictOldest(Predicate<Connection> scope, String why) {
        Connection victim = null;
        for (Connection c : connections.values()) {
            if (scope.test(c) && c.phase == Connection.Phase.HELLO && !c.busy && c.out == null) {
                victim = c;
                break;
            }
        }
        if (victim == null) {
            for (Connection c : connections.values()) {
                if (scope.test(c) && c.phase == Connection.Phase.SESSION && c.atRest()) {
                    victim = c;
                    break;
                }
            }
        }
        if (victim == null) {
            return false;
        }
        daemon.stats().evicted.incrementAndGet();
        daemon.stats().warnOnce(victim.peer, "evicted", "evicted " + victim + ": " + why);
        sendNow(victim, ErrorReply.of(ErrorCode.BUSY, "evicted: " + why + ", and this connection was the oldest"
                + (victim.phase == Connection.Phase.HELLO ? " without a HELLO" : " at rest")));
        close(victim, null);
        return true;
    }

    private void refuse(Fd fd, ErrorCode code, String message) {
        try {
            Outbound.frame(ErrorReply.of(code, message).encode(1), 1).flush(fd.get(), scratch);
        } catch (RuntimeException e) {
            // best effort: the peer may be gone
        } finally {
            fd.close();
        }
    }

    /** Writes a short answer if the socket takes it whole right now (a connection about to close). */
    private void sendNow(Connection c, ErrorReply reply) {
        if (c.out != null) {
            return;
        }
        try {
            int v = c.phase == Connection.Phase.HELLO ? 1 : c.version;
            Outbound.frame(reply.encode(v), v).flush(c.fd.get(), scratch);
        } catch (RuntimeException e) {
            // best effort
        }
    }

    // ------------------------------------------------------------------------------------ serving

    private void serve(Connection c, int revents) {
        if ((revents & (Posix.POLLERR | Posix.POLLNVAL)) != 0) {
            close(c, "ended: socket error");
            return;
        }
        if (c.out != null && (revents & (Posix.POLLOUT | Posix.POLLHUP)) != 0) {
            writeOut(c);
            return;
        }
        if (c.busy) {
            if ((revents & Posix.POLLHUP) != 0) {
                close(c, "ended: client closed its connection");
            }
            return;
        }
        if ((revents & (Posix.POLLIN | Posix.POLLHUP)) != 0) {
            readIn(c);
        }
    }

    private void readIn(Connection c) {
        boolean lease = c.phase == Connection.Phase.LEASE;
        Inbound.Progress p;
        try {
            p = c.inbound.read(c.fd.get(), scratch, maxPayload(c), (frame, length) -> checkFrameHeader(c, frame, length),
                    memory);
        } catch (PeerClosedException e) {
            close(c, "ended: client closed its connection");
            return;
        } catch (ProtocolException e) {
            if (lease) {
                close(c, "ended: " + e.getMessage());
                return;
            }
            daemon.stats().badRequests.incrementAndGet();
            daemon.stats().warnOnce(c.peer, "bad-request", "closed " + c + ": " + e.getMessage());
            c.inbound.release(memory);
            answer(c, Requests.Answer.of(Outbound.frame(ErrorReply.of(ErrorCode.BAD_REQUEST, e.getMessage())
                    .encode(versionOf(c)), versionOf(c)), Requests.Next.CLOSE, versionOf(c)));
            return;
        } catch (RuntimeException e) {
            close(c, "ended: " + e.getMessage());
            return;
        }
        switch (p) {
            case COMPLETE -> {
                if (lease) {
                    c.inbound.release(memory);
                    c.inbound.take();
                    close(c, "released");
                } else {
                    dispatch(c);
                }
            }
            case NO_MEMORY -> c.starved = true;
            case WAITING -> { }
        }
    }

    private static int versionOf(Connection c) {
        return c.phase == Connection.Phase.HELLO ? 1 : c.version;
    }

    private static int maxPayload(Connection c) {
        return switch (c.phase) {
            case HELLO -> ProtocolDescriptor.MAX_HELLO;
            case SESSION -> ProtocolDescriptor.MAX_REQUEST;
            case LEASE -> ProtocolDescriptor.HEADER_BYTES;
        };
    }

    /** The checks that need only the frame header: magic, version, type and its length. */
    private static void checkFrameHeader(Connection c, byte[] frame, int length) {
        ByteBuffer h = ByteBuffer.wrap(frame, 0, ProtocolDescriptor.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        int magic = h.getInt(0);
        int version = h.getShort(4) & 0xffff;
        int type = h.getShort(6) & 0xffff;
        if (magic != ProtocolDescriptor.MAGIC) {
            throw new ProtocolException("bad magic 0x" + Integer.toHexString(magic) + ": not an engram-host frame");
        }
        int expected = versionOf(c);
        if (version != expected) {
            throw new ProtocolException(typeName(type) + " encoded as version " + version + ", but version "
                    + expected + (c.phase == Connection.Phase.HELLO ? " is required for HELLO" : " was chosen"));
        }
        switch (c.phase) {
            case HELLO -> {
                if (type != MessageType.HELLO.code()) {
                    throw new ProtocolException("expected HELLO first, got " + typeName(type));
                }
            }
            case SESSION, LEASE -> {
                boolean empty = type == MessageType.STATUS.code() || type == MessageType.STOP.code()
                        || type == MessageType.BYE.code();
                if (empty && length != ProtocolDescriptor.HEADER_BYTES) {
                    throw new ProtocolException(typeName(type) + " has an empty body, but the message holds "
                            + (length - ProtocolDescriptor.HEADER_BYTES) + " bytes after the frame header");
                }
                if (c.phase == Connection.Phase.LEASE && type != MessageType.BYE.code()) {
                    throw new ProtocolException("unexpected " + typeName(type) + " on a lease");
                }
                if (!empty && type != MessageType.IMPORT.code() && type != MessageType.TAKEOVER.code()) {
                    throw new ProtocolException(typeName(type) + " is not a request a client may send now");
                }
            }
        }
    }

    /** A type code as a name where it is one ("STATUS (type 5)"), else "type N". */
    private static String typeName(int type) {
        for (MessageType t : MessageType.values()) {
            if (t.code() == type) {
                return t + " (type " + type + ")";
            }
        }
        return "type " + type;
    }

    private void dispatch(Connection c) {
        long reserved = c.inbound.reserved();
        byte[] payload = c.inbound.take();
        c.busy = true;
        c.lastActivityNanos = System.nanoTime();
        Connection.Phase phase = c.phase;
        int version = c.version;
        PeerCredentials peer = c.peer;
        workers.execute(() -> {
            Requests.Answer a;
            try {
                a = requests.handle(phase, version, peer, payload);
            } catch (RuntimeException e) {
                LOG.log(WARNING, "answering " + c + " failed: " + e);
                int v = phase == Connection.Phase.HELLO ? 1 : version;
                a = Requests.Answer.of(Outbound.frame(ErrorReply.of(ErrorCode.INTERNAL, String.valueOf(e.getMessage()))
                        .encode(v), v), Requests.Next.CLOSE, v);
            } catch (Throwable t) {
                daemon.fatal(Thread.currentThread(), t);
                return;
            }
            completions.add(new Completion(c, a, reserved));
            wakeup.signal();
        });
    }

    private void drainCompletions() {
        boolean freed = false;
        Completion done;
        while ((done = completions.poll()) != null) {
            memory.give(done.reserved());
            freed |= done.reserved() > 0;
            Connection c = done.connection();
            if (connections.get(c.id) != c) {
                if (done.answer().onWritten() != null) {
                    done.answer().onWritten().run();
                }
                continue;
            }
            c.busy = false;
            answer(c, done.answer());
        }
        if (freed) {
            for (Connection c : connections.values()) {
                c.starved = false;
            }
        }
    }

    /** Takes an answer on: writes what the socket takes now, the rest when it has room. */
    private void answer(Connection c, Requests.Answer a) {
        c.version = a.version();
        c.afterOut = a.next();
        c.onWritten = a.onWritten();
        if (a.next() == Requests.Next.SESSION && c.phase == Connection.Phase.HELLO) {
            c.phase = Connection.Phase.SESSION;
        }
        if (a.out() == null) {
            finishAnswer(c);
            return;
        }
        c.out = a.out();
        c.outSinceNanos = System.nanoTime();
        writeOut(c);
    }

    private void writeOut(Connection c) {
        try {
            if (!c.out.flush(c.fd.get(), scratch)) {
                return;
            }
        } catch (RuntimeException e) {
            close(c, "ended: " + e.getMessage());
            return;
        }
        c.out = null;
        finishAnswer(c);
    }

    private void finishAnswer(Connection c) {
        Runnable then = c.onWritten;
        c.onWritten = null;
        if (then != null) {
            then.run();
        }
        c.lastActivityNanos = System.nanoTime();
        switch (c.afterOut) {
            case SESSION -> { }
            case LEASE -> {
                c.phase = Connection.Phase.LEASE;
                c.leaseId = daemon.leases().add(c.peer.pid(), c.peer.uid());
            }
            case CLOSE -> close(c, null);
            case DETACH -> detach(c);
        }
    }

    /** The connection leaves the loop, its socket going to a handover thread, which then owns it. */
    private void detach(Connection c) {
        connections.remove(c.id);
        perUid.computeIfPresent(c.peer.uid(), (k, v) -> v == 1 ? null : v - 1);
        daemon.stats().open.decrementAndGet();
        c.inbound.release(memory);
        daemon.handoverSender().start(c.fd, c.peer);
    }

    private void expire(long now) {
        List<Connection> late = null;
        for (Connection c : connections.values()) {
            if (c.deadline(limits) <= now) {
                if (late == null) {
                    late = new ArrayList<>();
                }
                late.add(c);
            }
        }
        if (late == null) {
            return;
        }
        for (Connection c : late) {
            String why = c.deadlineName(limits);
            daemon.stats().timedOut.incrementAndGet();
            daemon.stats().warnOnce(c.peer, "timed-out", "closed " + c + ": " + why);
            if (c.phase == Connection.Phase.LEASE) {
                close(c, "ended: " + why); // the daemon never writes on a lease
                continue;
            }
            sendNow(c, ErrorReply.of(ErrorCode.TIMED_OUT, why));
            close(c, null);
        }
    }

    /** Closes one connection; {@code leaseEnd} says why, for a lease's log line. */
    private void close(Connection c, String leaseEnd) {
        if (connections.remove(c.id) == null) {
            return;
        }
        perUid.computeIfPresent(c.peer.uid(), (k, v) -> v == 1 ? null : v - 1);
        daemon.stats().open.decrementAndGet();
        if (!c.busy) {
            c.inbound.release(memory);
        }
        if (c.phase == Connection.Phase.LEASE) {
            daemon.leases().end(c.leaseId, leaseEnd == null ? "ended by the daemon" : leaseEnd);
        }
        if (c.afterOut == Requests.Next.DETACH) {
            daemon.handoverSender().release(); // a TAKEOVER granted, but its connection closed before it began
        }
        Runnable then = c.onWritten;
        c.onWritten = null;
        if (then != null) {
            then.run();
        }
        c.fd.close();
    }

    /** Stops the loop's thread and its workers (waiting for both); false when they were stopped already. */
    private boolean stopThreads() {
        if (!running) {
            return false;
        }
        running = false;
        wakeup.signal();
        try {
            thread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        workers.shutdownNow();
        try {
            workers.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return true;
    }

    /** Stops the loop, then ends every connection and lease (clients see EOF). */
    @Override
    public void close() {
        if (!stopThreads()) {
            return;
        }
        drainCompletions();
        for (Connection c : new ArrayList<>(connections.values())) {
            if (c.out != null) {
                try {
                    c.out.flush(c.fd.get(), scratch);
                } catch (RuntimeException e) {
                    // best effort while stopping
                }
            }
            close(c, "ended: the daemon stopped");
        }
        wakeup.close();
    }
}
