package io.engramhost.daemon.loop;

import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.os.BorrowedFd;
import io.engramhost.os.Fd;
import io.engramhost.os.NonBlocking;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.protocol.ConnectionPhase;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameHeader;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Every connection of the daemon, served from one thread with poll(2): accepting ({@link ConnectionTable}), reading
 * requests as their bytes arrive, writing answers as the sockets take them, and enforcing the deadlines of
 * docs/protocol.md ({@link Deadlines}). A quiet, slow or flooding peer costs a slot in the poll set and at most its
 * share of request memory, never a thread. Complete requests go to the workers, which answer them with the
 * {@link Handler}; their answers come back through a queue and an eventfd. A handover freezes it ({@link Freeze}).
 *
 * <p>{@link #run} goes round until {@link #close}; {@link #runOnce} is one round, with time read from the
 * {@link Services#clock}, so a test drives it round by round.
 */
public final class SessionLoop implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(SessionLoop.class.getName());
    private static final int SCRATCH_BYTES = 256 << 10;
    private static final int SLOT_WAKEUP = 0;
    private static final int SLOT_LISTENER = 1;
    /** The longest a round waits in poll: the loop's heartbeat goes at least this often. */
    static final int MAX_WAIT_MILLIS = 1000;

    /** Answers one complete request, on a worker thread (the daemon's {@link Requests}). */
    interface Handler {
        Answer handle(ConnectionPhase phase, int version, PeerCredentials peer, byte[] payload);
    }

    /** Where a connection goes that a TAKEOVER took out of the loop (the daemon's {@code HandoverSender}). */
    public interface Detach {
        /** The successor's connection, now the handover's to own. */
        void detached(Fd fd, PeerCredentials peer);

        /** A granted TAKEOVER whose connection closed before it left the loop. */
        void abandoned();
    }

    private record Completion(Connection connection, Answer answer, long reserved, boolean large) {
    }

    private final Services services;
    private final ConnectionLimits limits;
    private final BorrowedFd listener;
    private final String socketName;
    private final Handler handler;
    private final Detach detach;
    private final NonBlocking.Wakeup wakeup = new NonBlocking.Wakeup("engram-host poll loop wakeup");
    private final NonBlocking.PollSet pollSet = new NonBlocking.PollSet(64);
    private final NonBlocking.Scratch scratch = new NonBlocking.Scratch(SCRATCH_BYTES);
    private final ConcurrentLinkedQueue<Completion> completions = new ConcurrentLinkedQueue<>();
    private final ExecutorService workers;
    private final RequestMemory memory;
    private final Deadlines deadlines = new Deadlines();
    private final ConnectionTable table;
    private final Freeze freeze = new Freeze();
    private final Thread thread;
    private volatile boolean running = true;
    /** False once {@link #stopAccepting}: new connections stay in the listener's backlog. */
    private volatile boolean accepting = true;
    private volatile long heartbeat;
    private Connection[] polled = new Connection[0];

    /**
     * A loop over {@code listener}'s connections; it owns {@code workers} (stopped on close) and its own thread
     * (from {@link Services#threads}), which {@link #start} starts.
     */
    public SessionLoop(Services services, ConnectionLimits limits, BorrowedFd listener, String socketName,
            Handler handler, Detach detach, ExecutorService workers) {
        this.services = services;
        this.limits = limits;
        this.listener = listener;
        this.socketName = socketName;
        this.handler = handler;
        this.detach = detach;
        this.workers = workers;
        this.memory = new RequestMemory(limits.requestMemory(), c -> c.starved = false);
        this.table = new ConnectionTable(limits, services, memory, deadlines, this::sendNow, detach::abandoned);
        this.thread = services.threads().thread(this::run, "engram-sessions");
        this.heartbeat = services.clock().getAsLong();
    }

    public void start() {
        thread.start();
    }

    public long requestMemoryUsed() {
        return memory.used();
    }

    /** When the loop last went round (the clock's nanoseconds); it does at least every {@link #MAX_WAIT_MILLIS}. */
    public long heartbeatNanos() {
        return heartbeat;
    }

    private void run() {
        while (running) {
            runOnce(MAX_WAIT_MILLIS);
        }
    }

    /** One round: waits at most {@code maxWaitMillis} (less when a deadline comes sooner) and serves what is ready. */
    void runOnce(int maxWaitMillis) {
        long now = services.clock().getAsLong();
        heartbeat = now;
        int n = fillPollSet();
        pollSet.poll(n, waitMillis(now, maxWaitMillis));
        if (!running) {
            return;
        }
        if (pollSet.revents(SLOT_WAKEUP) != 0) {
            wakeup.drain();
        }
        drainCompletions();
        if (freeze.mode() == Freeze.Mode.FROZEN) {
            return;
        }
        for (int slot = 2; slot < n; slot++) {
            Connection c = polled[slot];
            int revents = pollSet.revents(slot);
            if (revents != 0 && table.contains(c)) {
                serve(c, revents);
                refile(c);
            }
        }
        if (accepting && freeze.mode() == Freeze.Mode.RUNNING && pollSet.revents(SLOT_LISTENER) != 0) {
            table.acceptPending(listener, socketName);
        }
        expire(services.clock().getAsLong());
        freeze.step(services.clock().getAsLong(), table, this::sendNow, services.leases());
    }

    /** The connections, oldest first (tests and the handover read them between rounds). */
    List<Connection> connections() {
        return table.snapshot();
    }

    // ------------------------------------------------------------------------------------ handover

    /**
     * Stops accepting and reading new requests, lets what is under way finish (at most {@code drainMillis}; what is
     * still under way then is closed with TIMED_OUT), then freezes: the future gets every connection, all at rest.
     * The loop's connections stay its own until {@link #closeHandedOver} or {@link #resume}.
     */
    public CompletableFuture<List<HandedConnection>> freeze(long drainMillis) {
        CompletableFuture<List<HandedConnection>> f = freeze.begin(services.clock().getAsLong()
                + drainMillis * 1_000_000L);
        wakeup.signal();
        return f;
    }

    /**
     * Accepts no more connections; those already accepted are served as before. A daemon that stops while systemd's
     * fd store keeps its listening socket calls this, so that a client connecting meanwhile waits in the backlog for
     * the next daemon instead of being answered STOPPING by this one.
     */
    public void stopAccepting() {
        accepting = false;
        wakeup.signal();
    }

    /** After a failed handover: serves again, accepting first what waited in the backlog. */
    public void resume() {
        freeze.resume();
        wakeup.signal();
    }

    /** Takes over connections a predecessor handed over (before {@link #start}). */
    public void install(List<HandedConnection> handed) {
        table.install(handed);
    }

    /**
     * The handover committed: the loop stops, and its sockets are closed without a word, since the successor holds
     * each of them too (a client sees nothing); leases are logged as handed over.
     */
    public void closeHandedOver(int successor) {
        if (stopThreads()) {
            table.closeHandedOver(successor);
            wakeup.close();
        }
    }

    private int fillPollSet() {
        int n = 2 + table.size();
        if (polled.length < n) {
            polled = new Connection[Math.max(n, polled.length * 2)];
        }
        Freeze.Mode m = freeze.mode();
        pollSet.set(SLOT_WAKEUP, wakeup.fd(), Posix.POLLIN);
        pollSet.set(SLOT_LISTENER, accepting && m == Freeze.Mode.RUNNING ? listener.get() : -1, Posix.POLLIN);
        int slot = 2;
        for (Connection c : table.all()) {
            if (!freeze.polls(c)) {
                continue; // frozen, or at rest while draining: left for the successor
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

    private int waitMillis(long now, int maxWaitMillis) {
        long next = deadlines.next();
        if (next == Long.MAX_VALUE) {
            return maxWaitMillis;
        }
        return (int) Math.max(0, Math.min(maxWaitMillis, (next - now + 999_999) / 1_000_000));
    }

    /** Files {@code c}'s deadline anew after the loop touched it (unchanged: nothing to do). */
    private void refile(Connection c) {
        if (table.contains(c)) {
            deadlines.file(c, c.deadline(limits));
        }
    }

    /** Writes a short answer if the socket takes it whole right now (a connection about to close). */
    private void sendNow(Fd fd, int version, ErrorReply reply) {
        try {
            Outbound.frame(reply.encode(version), version).flush(fd.get(), scratch);
        } catch (RuntimeException e) {
            // best effort: the peer may be gone
        }
    }

    // ------------------------------------------------------------------------------------ serving

    private void serve(Connection c, int revents) {
        if ((revents & (Posix.POLLERR | Posix.POLLNVAL)) != 0) {
            table.close(c, "ended: socket error");
        } else if (c.out != null && (revents & (Posix.POLLOUT | Posix.POLLHUP)) != 0) {
            writeOut(c);
        } else if (c.busy) {
            if ((revents & Posix.POLLHUP) != 0) {
                table.close(c, "ended: client closed its connection");
            }
        } else if ((revents & (Posix.POLLIN | Posix.POLLHUP)) != 0) {
            readIn(c);
        }
    }

    private void readIn(Connection c) {
        boolean lease = c.phase == ConnectionPhase.LEASE;
        Inbound.Progress p;
        try {
            p = c.inbound.read(c, scratch, maxPayload(c.phase),
                    (frame, length) -> FrameHeader.checkRequest(c.phase, c.version, frame, length), memory,
                    services.clock());
        } catch (PeerClosedException e) {
            table.close(c, "ended: client closed its connection");
            return;
        } catch (ProtocolException e) {
            if (lease) {
                table.close(c, "ended: " + e.getMessage());
                return;
            }
            services.stats().badRequests.incrementAndGet();
            services.stats().warnOnce(c.peer, "bad-request", "closed " + c + ": " + e.getMessage());
            c.inbound.release(memory, c);
            answer(c, Answer.error(ErrorReply.of(ErrorCode.BAD_REQUEST, e.getMessage()), Answer.Next.CLOSE,
                    c.frameVersion()));
            return;
        } catch (RuntimeException e) {
            table.close(c, "ended: " + e.getMessage());
            return;
        }
        switch (p) {
            case COMPLETE -> {
                if (lease) {
                    c.inbound.release(memory, c);
                    c.inbound.take();
                    table.close(c, "released");
                } else {
                    dispatch(c);
                }
            }
            case NO_MEMORY -> c.starved = true;
            case WAITING -> { }
        }
    }

    private static int maxPayload(ConnectionPhase phase) {
        return switch (phase) {
            case HELLO -> ProtocolDescriptor.MAX_HELLO;
            case SESSION -> ProtocolDescriptor.MAX_REQUEST;
            case LEASE -> ProtocolDescriptor.HEADER_BYTES;
        };
    }

    private void dispatch(Connection c) {
        long reserved = c.inbound.reserved();
        boolean large = c.inbound.large();
        byte[] payload = c.inbound.take();
        c.busy = true;
        c.lastActivityNanos = services.clock().getAsLong();
        ConnectionPhase phase = c.phase;
        int version = c.version;
        PeerCredentials peer = c.peer;
        workers.execute(() -> {
            Answer a;
            try {
                a = handler.handle(phase, version, peer, payload);
            } catch (RuntimeException e) {
                LOG.log(WARNING, "answering " + c + " failed: " + e);
                int v = phase.frameVersion(version);
                a = Answer.error(ErrorReply.of(ErrorCode.INTERNAL, String.valueOf(e.getMessage())), Answer.Next.CLOSE, v);
            } catch (Throwable t) {
                services.fatal().uncaughtException(Thread.currentThread(), t);
                return;
            }
            completions.add(new Completion(c, a, reserved, large));
            wakeup.signal();
        });
    }

    private void drainCompletions() {
        Completion done;
        while ((done = completions.poll()) != null) {
            if (done.reserved() > 0) {
                memory.give(done.reserved(), done.large()); // wakes who now fits
            }
            Connection c = done.connection();
            if (!table.contains(c)) {
                if (done.answer().onWritten() != null) {
                    done.answer().onWritten().run();
                }
                continue;
            }
            c.busy = false;
            answer(c, done.answer());
            refile(c);
        }
    }

    /** Takes an answer on: writes what the socket takes now, the rest when it has room. */
    private void answer(Connection c, Answer a) {
        c.version = a.version();
        c.afterOut = a.next();
        c.onWritten = a.onWritten();
        if (a.next() == Answer.Next.SESSION && c.phase == ConnectionPhase.HELLO) {
            c.phase = ConnectionPhase.SESSION;
        }
        if (a.out() == null) {
            finishAnswer(c);
            return;
        }
        c.out = a.out();
        c.outSinceNanos = services.clock().getAsLong();
        writeOut(c);
    }

    private void writeOut(Connection c) {
        try {
            if (!c.out.flush(c.fd.get(), scratch)) {
                return;
            }
        } catch (RuntimeException e) {
            table.close(c, "ended: " + e.getMessage());
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
        c.lastActivityNanos = services.clock().getAsLong();
        switch (c.afterOut) {
            case SESSION -> { }
            case LEASE -> {
                c.phase = ConnectionPhase.LEASE;
                c.leaseId = services.leases().add(c.peer.pid(), c.peer.uid());
            }
            case CLOSE -> table.close(c, null);
            case DETACH -> {
                table.detach(c);
                detach.detached(c.fd, c.peer);
            }
        }
    }

    private void expire(long now) {
        Connection c;
        while ((c = deadlines.pollDue(now)) != null) {
            if (!table.contains(c) || c.deadline(limits) > now) {
                refile(c); // moved on since it was filed
                continue;
            }
            String why = c.deadlineName(limits);
            services.stats().timedOut.incrementAndGet();
            services.stats().warnOnce(c.peer, "timed-out", "closed " + c + ": " + why);
            if (c.phase == ConnectionPhase.LEASE) {
                table.close(c, "ended: " + why); // the daemon never writes on a lease
                continue;
            }
            if (c.out == null) {
                sendNow(c.fd, c.frameVersion(), ErrorReply.of(ErrorCode.TIMED_OUT, why));
            }
            table.close(c, null);
        }
    }

    /** Stops the loop's thread and its workers (waiting for both); false when they were stopped already. */
    private boolean stopThreads() {
        if (!running) {
            return false;
        }
        running = false;
        wakeup.signal();
        if (thread.isAlive() && thread != Thread.currentThread()) {
            try {
                thread.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
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
        for (Connection c : table.snapshot()) {
            if (c.out != null) {
                try {
                    c.out.flush(c.fd.get(), scratch);
                } catch (RuntimeException e) {
                    // best effort while stopping
                }
            }
            table.close(c, "ended: the daemon stopped");
        }
        wakeup.close();
    }
}
