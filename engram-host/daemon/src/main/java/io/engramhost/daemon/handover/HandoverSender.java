package io.engramhost.daemon.handover;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.daemon.loop.Answers;
import io.engramhost.daemon.loop.HandedConnection;
import io.engramhost.daemon.loop.Requests;
import io.engramhost.daemon.loop.Services;
import io.engramhost.daemon.loop.SessionLoop;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.os.BorrowedFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FdRef;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.ReceiveTimeoutException;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.ConnectionPhase;
import io.engramhost.protocol.Handover;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.Parts;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.store.LoadReport;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The predecessor's side of a takeover (docs/protocol.md, "Handing over to a successor daemon"), on a thread of
 * its own once the session loop has detached the successor's connection:
 * <ol>
 * <li>HANDOVER_CATALOG with the listening socket and every region fd; wait for HANDOVER_READY;</li>
 * <li>the loop drains and freezes; HANDOVER_COMMIT with the lock and every connection;</li>
 * <li>HANDOVER_DONE is the commit point: the daemon then closes its copies and exits 0.</li>
 * </ol>
 * Anything else before the commit point (an ABORT, EOF, a timeout, a malformed answer) ends the handover and the
 * loop serves again; nothing was given away, since every fd sent was a copy. A successor that holds the commit
 * without answering is killed before the loop resumes, so two daemons never serve at once.
 */
public final class HandoverSender implements SessionLoop.Detach, Requests.TakeoverSlot {
    private static final System.Logger LOG = System.getLogger(HandoverSender.class.getName());
    /** How long the successor may take to check the catalog (digests included) before it answers READY. */
    static final int READY_TIMEOUT_MILLIS = 600_000;
    /** How long connections may take to finish what is under way before the commit. */
    static final int DRAIN_MILLIS = 2_000;
    /** How long the successor may take from COMMIT to DONE; then it is killed and this daemon serves again. */
    static final int DONE_TIMEOUT_MILLIS = 30_000;

    /** What a handover hands over, and what it does to the daemon that hands it over. */
    public interface Source {
        /** The ready catalog's answers (null: the daemon is stopping). */
        Answers answers();

        LoadReport report();

        /** The listening socket (the daemon keeps owning it; the successor gets a copy). */
        BorrowedFd listener();

        /** The lock file's fd (likewise). */
        Fd lock();

        /** The loop drains, then freezes: every connection, at rest. */
        CompletableFuture<List<HandedConnection>> freeze(long drainMillis);

        /** The handover failed before its commit point: the loop serves again. */
        void resume();

        /** The commit point passed: the daemon stops without touching what the successor now owns. */
        void handedOver(int successor);
    }

    private final Services services;
    private final DaemonHooks hooks;
    private final Source source;
    private final AtomicReference<PeerCredentials> reserved = new AtomicReference<>();

    public HandoverSender(Services services, DaemonHooks hooks, Source source) {
        this.services = services;
        this.hooks = hooks;
        this.source = source;
    }

    /** Claims the one handover slot for {@code peer}; false while another takeover holds it. */
    @Override
    public boolean reserve(PeerCredentials peer, Handover.Takeover t) {
        if (!reserved.compareAndSet(null, peer)) {
            return false;
        }
        LOG.log(INFO, "takeover requested by pid " + peer.pid() + " (uid " + peer.uid() + ", " + t.build() + ")");
        return true;
    }

    @Override
    public void abandoned() {
        reserved.set(null);
    }

    @Override
    public void refused(PeerCredentials peer, String why) {
        LOG.log(WARNING, "pid " + peer.pid() + " (uid " + peer.uid() + "): " + why);
    }

    /** Runs the handover on its own thread; {@code fd} (the successor's connection) is this sender's now. */
    @Override
    public void detached(Fd fd, PeerCredentials peer) {
        services.threads().thread(() -> run(fd, peer), "engram-handover").start();
    }

    private void run(Fd fd, PeerCredentials peer) {
        long t0 = System.nanoTime();
        boolean committed = false;
        try (ProtocolChannel ch = new ProtocolChannel(UnixConnection.of(fd, "successor pid " + peer.pid()))) {
            UnixSockets.setBlocking(fd, true);
            committed = handOver(ch, peer, t0);
        } catch (RuntimeException e) {
            LOG.log(WARNING, "takeover by pid " + peer.pid() + " failed before its commit point, so this daemon keeps"
                    + " serving: " + e.getMessage());
        } finally {
            if (!committed) {
                source.resume();
                abandoned();
            }
        }
    }

    /** True once committed: the successor owns everything. */
    private boolean handOver(ProtocolChannel ch, PeerCredentials peer, long t0) {
        hooks.reached(DaemonHooks.Point.HANDOVER_ACCEPTED);
        Answers answers = source.answers();
        if (answers == null) {
            throw new IllegalStateException("the catalog is gone (the daemon is stopping)");
        }
        CatalogFrame encoded = CatalogFrame.of(answers.catalog(), source.report().encode());
        sendCatalog(ch, encoded, source.listener());
        expect(ch, MessageType.HANDOVER_READY, READY_TIMEOUT_MILLIS);
        hooks.reached(DaemonHooks.Point.HANDOVER_READY);

        List<HandedConnection> quiet;
        try {
            quiet = source.freeze(DRAIN_MILLIS).get(DRAIN_MILLIS + 5_000L, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new IllegalStateException("the connections did not come to rest: " + e, e);
        }
        List<FdRef> conns = new ArrayList<>();
        conns.add(source.lock());
        List<Handover.Connection> states = new ArrayList<>();
        for (HandedConnection q : quiet) {
            conns.add(q.fd());
            states.add(new Handover.Connection(q.phase(), q.version(), q.peer().pid(), q.peer().uid(), q.peer().gid(),
                    q.leaseId(), q.leaseId() == 0 ? 0 : q.leaseSince().getEpochSecond() * 1_000_000_000L
                            + q.leaseSince().getNano()));
        }
        send(ch, new Handover.Commit(services.leases().nextId(), states).encode(), conns);
        hooks.reached(DaemonHooks.Point.HANDOVER_COMMITTED);
        try {
            expect(ch, MessageType.HANDOVER_DONE, DONE_TIMEOUT_MILLIS);
        } catch (ReceiveTimeoutException e) {
            // It holds copies of every connection and the lock, and might still commit: it must not, or two would serve.
            Posix.kill(peer.pid(), 9);
            LOG.log(WARNING, "the successor pid " + peer.pid() + " did not confirm within " + DONE_TIMEOUT_MILLIS
                    + " ms of the commit; killed it");
            throw e;
        }
        LOG.log(INFO, "handed over to pid " + peer.pid() + " in " + String.format("%.1f ms", (System.nanoTime() - t0) / 1e6)
                + ": " + encoded.regionFds().size() + " region fds, " + quiet.size() + " connections (" + states.stream()
                        .filter(s -> s.phase() == ConnectionPhase.LEASE).count() + " leases); this daemon exits");
        source.handedOver(peer.pid());
        return true;
    }

    /** HANDOVER_CATALOG: the frame, with the listening socket and then every region fd. */
    static void sendCatalog(ProtocolChannel ch, CatalogFrame encoded, FdRef listener) {
        List<FdRef> fds = new ArrayList<>();
        fds.add(listener);
        fds.addAll(encoded.regionFds());
        send(ch, encoded.frame(), fds);
    }

    /** One frame, in parts when long, its fds on the first message. */
    private static void send(ProtocolChannel ch, byte[] frame, List<? extends FdRef> fds) {
        List<Parts.Message> parts = Parts.split(List.of(Parts.Slice.of(frame)), 2);
        for (int i = 0; i < parts.size(); i++) {
            ch.send(ByteBuffer.wrap(parts.get(i).bytes()), i == 0 ? fds : List.of());
        }
    }

    /** The next frame must be {@code type} with an empty body; an ABORT, EOF or anything else throws. */
    static void expect(ProtocolChannel ch, MessageType type, int timeoutMillis) {
        try (ProtocolChannel.Incoming in = ch.receive(ProtocolDescriptor.MAX_HELLO, 0, timeoutMillis)) {
            if (in.type() == MessageType.HANDOVER_ABORT) {
                throw new IllegalStateException("the successor refused: " + Handover.decodeAbort(in.reader()));
            }
            if (in.type() != type) {
                throw new IllegalStateException("expected " + type + " from the successor, got " + in.type());
            }
            in.reader().requireVersion(2).end();
        } catch (PeerClosedException e) {
            throw new IllegalStateException("the successor closed the connection (it exited, or was killed) before "
                    + type);
        }
    }
}
