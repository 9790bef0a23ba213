package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.json.JsonWriter;
import io.engramhost.os.Fd;
import io.engramhost.os.FdRef;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.Handover;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.store.Catalog;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
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
final class HandoverSender {
    private static final System.Logger LOG = System.getLogger(HandoverSender.class.getName());
    /** How long the successor may take to check the catalog (digests included) before it answers READY. */
    static final int READY_TIMEOUT_MILLIS = 600_000;
    /** How long connections may take to finish what is under way before the commit. */
    static final int DRAIN_MILLIS = 2_000;
    /** How long the successor may take from COMMIT to DONE; then it is killed and this daemon serves again. */
    static final int DONE_TIMEOUT_MILLIS = 30_000;
    /**
     * TEST ONLY: {@code STEP:PATH} holds the predecessor at STEP ({@code accepted}, {@code ready} or
     * {@code committed}) until PATH exists, so that a test can kill a daemon at a known step.
     */
    static final String TEST_GATE = "ENGRAM_HOST_TEST_HANDOVER_GATE";

    private final Daemon daemon;
    private final AtomicReference<PeerCredentials> reserved = new AtomicReference<>();

    HandoverSender(Daemon daemon) {
        this.daemon = daemon;
    }

    /** Claims the one handover slot for {@code peer}; false while another takeover holds it. */
    boolean reserve(PeerCredentials peer, Handover.Takeover t) {
        if (!reserved.compareAndSet(null, peer)) {
            return false;
        }
        LOG.log(INFO, "takeover requested by pid " + peer.pid() + " (uid " + peer.uid() + ", " + t.build() + ")");
        return true;
    }

    void release() {
        reserved.set(null);
    }

    void refused(PeerCredentials peer, String why) {
        LOG.log(WARNING, "pid " + peer.pid() + " (uid " + peer.uid() + "): " + why);
    }

    /** Runs the handover on its own thread; {@code fd} (the successor's connection) is this sender's now. */
    void start(Fd fd, PeerCredentials peer) {
        daemon.thread(() -> run(fd, peer), "engram-handover").start();
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
                daemon.resumeAfterHandover();
                release();
            }
        }
    }

    /** True once committed: the successor owns everything. */
    private boolean handOver(ProtocolChannel ch, PeerCredentials peer, long t0) {
        gate("accepted");
        Catalog catalog = daemon.catalog();
        if (catalog == null) {
            throw new IllegalStateException("the catalog is gone (the daemon is stopping)");
        }
        Encoded encoded = encode(catalog, JsonWriter.write(daemon.progress().facts()));
        List<FdRef> fds = new ArrayList<>();
        fds.add(daemon.listenerFd());
        fds.addAll(encoded.regionFds());
        send(ch, encoded.frame(), fds);
        expect(ch, MessageType.HANDOVER_READY, READY_TIMEOUT_MILLIS);
        gate("ready");

        List<SessionLoop.Quiet> quiet;
        try {
            quiet = daemon.freezeForHandover(DRAIN_MILLIS).get(DRAIN_MILLIS + 5_000L, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new IllegalStateException("the connections did not come to rest: " + e, e);
        }
        List<FdRef> conns = new ArrayList<>();
        conns.add(daemon.lockFd());
        List<Handover.Connection> states = new ArrayList<>();
        for (SessionLoop.Quiet q : quiet) {
            conns.add(q.fd());
            Leases.Lease l = q.phase() == Connection.Phase.LEASE ? daemon.leases().get(q.leaseId()) : null;
            states.add(new Handover.Connection(q.phase().ordinal(), q.version(), q.peer().pid(), q.peer().uid(),
                    q.peer().gid(), l == null ? 0 : l.id(), l == null ? 0 : l.since().getEpochSecond() * 1_000_000_000L + l.since().getNano()));
        }
        send(ch, new Handover.Commit(daemon.leases().nextId(), states).encode(), conns);
        gate("committed");
        try {
            expect(ch, MessageType.HANDOVER_DONE, DONE_TIMEOUT_MILLIS);
        } catch (io.engramhost.os.ReceiveTimeoutException e) {
            // It holds copies of every connection and the lock, and might still commit: it must not, or two would serve.
            Posix.kill(peer.pid(), 9);
            LOG.log(WARNING, "the successor pid " + peer.pid() + " did not confirm within " + DONE_TIMEOUT_MILLIS
                    + " ms of the commit; killed it");
            throw e;
        }
        LOG.log(INFO, "handed over to pid " + peer.pid() + " in " + String.format("%.1f ms", (System.nanoTime() - t0) / 1e6)
                + ": " + encoded.regionFds().size() + " region fds, " + quiet.size() + " connections (" + states.stream()
                        .filter(s -> s.phase() == Handover.Connection.LEASE).count() + " leases); this daemon exits");
        daemon.handedOver(peer.pid());
        return true;
    }

    /** A catalog as HANDOVER_CATALOG carries it: the frame, and its region fds in the order the frame indexes them. */
    record Encoded(byte[] frame, List<Fd> regionFds) {
    }

    /**
     * Encodes {@code catalog} with {@code report} (the load's facts, JSON) for a successor (fd 0, the listening
     * socket, goes before the regions) or for systemd's fd store (the catalog memfd): each region fd once.
     */
    static Encoded encode(Catalog catalog, String report) {
        List<Fd> fds = new ArrayList<>();
        Map<Fd, Integer> index = new IdentityHashMap<>();
        List<Handover.Served> served = new ArrayList<>();
        for (Map.Entry<Integer, Catalog.Served> e : catalog.byDevice().entrySet()) {
            List<Fd> own = e.getValue().fds();
            int[] idx = new int[own.size()];
            for (int i = 0; i < own.size(); i++) {
                Integer at = index.get(own.get(i));
                if (at == null) {
                    at = index.size();
                    index.put(own.get(i), at);
                    fds.add(own.get(i));
                }
                idx[i] = at;
            }
            served.add(new Handover.Served(e.getKey(), e.getValue().manifest(), idx));
        }
        byte[] frame = new Handover.Catalog(Daemon.VERSION, catalog.backend(), catalog.fingerprintSha256(), fds.size(),
                served, report).encode();
        return new Encoded(frame, List.copyOf(fds));
    }

    /** One frame, in parts when long, its fds on the first message. */
    private static void send(ProtocolChannel ch, byte[] frame, List<? extends FdRef> fds) {
        List<io.engramhost.protocol.Parts.Message> parts = io.engramhost.protocol.Parts.split(
                List.of(io.engramhost.protocol.Parts.Slice.of(frame)), 2);
        for (int i = 0; i < parts.size(); i++) {
            ch.send(java.nio.ByteBuffer.wrap(parts.get(i).bytes()), i == 0 ? fds : List.of());
        }
    }

    /** The next frame must be {@code type} with an empty body; an ABORT, EOF or anything else throws. */
    private static void expect(ProtocolChannel ch, MessageType type, int timeoutMillis) {
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

    /** TEST ONLY ({@link #TEST_GATE}). */
    private static void gate(String step) {
        io.engramhost.store.TestGate.hold(TEST_GATE, step, "handover");
    }
}
