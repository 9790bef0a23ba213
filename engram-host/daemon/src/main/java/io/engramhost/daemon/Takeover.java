package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.json.JsonReader;
import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.NativeException;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Handover;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import io.engramhost.protocol.Welcome;
import io.engramhost.store.AdoptedCatalog;
import io.engramhost.store.Catalog;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The successor's side of a takeover ({@code serve --takeover}; docs/protocol.md, "Handing over to a successor
 * daemon"): asks the daemon on the socket to hand over, checks the catalog and every fd it sends, and becomes the
 * daemon once the predecessor commits. When the predecessor dies midway, the successor still ends up as the one
 * daemon: with the catalog in hand it takes the lock as any new daemon would and serves what it holds; without,
 * {@link PredecessorGoneException} tells the caller to load from the checkpoint.
 */
public final class Takeover {
    private static final System.Logger LOG = System.getLogger(Takeover.class.getName());
    /** How long the predecessor may take to answer TAKEOVER with its catalog. */
    static final int CATALOG_TIMEOUT_MILLIS = 60_000;
    /** From READY to COMMIT: the predecessor drains its connections (at most 2 s) first. */
    static final int COMMIT_TIMEOUT_MILLIS = 60_000;
    /**
     * TEST ONLY: {@code STEP:PATH} holds the successor at STEP ({@code request}: before it connects, which the
     * takeover benchmark uses to time the takeover without the JVM's start; {@code catalog} or {@code commit}),
     * as the sender's.
     */
    static final String TEST_GATE = "ENGRAM_HOST_TEST_TAKEOVER_GATE";

    private Takeover() {
    }

    /** No daemon answers on the socket, or it died before it sent its catalog: load from the checkpoint instead. */
    public static final class PredecessorGoneException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        PredecessorGoneException(String message) {
            super(message);
        }
    }

    /**
     * Takes over from the daemon on {@code socket}. Returns the daemon this process now is, serving.
     *
     * @throws PredecessorGoneException when there is no daemon to take over from (nothing was taken)
     * @throws IllegalStateException with one line when the takeover is refused or what was handed over fails a
     *     check; the predecessor then keeps serving
     */
    public static Daemon run(DaemonContext context, Path socket, boolean verifyDigests) {
        warmUp();
        gate("request");
        long t0 = System.nanoTime();
        UnixConnection conn;
        try {
            conn = UnixConnection.connect(socket);
        } catch (NativeException e) {
            if (e.errno() == Errno.ENOENT || e.errno() == Errno.ECONNREFUSED) {
                throw new PredecessorGoneException("no daemon listens on " + socket + " (" + e.getMessage() + ")");
            }
            throw e;
        }
        try (ProtocolChannel ch = new ProtocolChannel(conn)) {
            PeerCredentials peer = conn.peerCredentials();
            if (!context.mayStop(peer.uid())) {
                throw new IllegalStateException("takeover refused: the daemon on " + socket + " runs as uid " + peer.uid()
                        + "; only its own uid or root may take it over");
            }
            return converse(context, socket, verifyDigests, ch, peer, t0);
        }
    }

    /**
     * Binds and runs once, before the takeover begins, the native calls it makes (socketpair, sendmsg and recvmsg
     * with an fd, fstat, the seals, a listening socket's checks), so that their first-use cost (JNR's stubs, class
     * loading) is paid while the predecessor still serves, not between its freeze and its commit.
     */
    private static void warmUp() {
        for (Class<?> c : List.of(Daemon.class, SessionLoop.class, Connection.class, Leases.class, Requests.class,
                DaemonLock.class, RuntimeDir.class, StatusDocument.class, ConnectionStats.class, Inbound.class,
                Outbound.class, AdoptedCatalog.class, Catalog.class, io.engramhost.checkpoint.Fingerprint.class,
                io.engramhost.protocol.Manifest.class, Welcome.class, ErrorReply.class, Handover.Catalog.class,
                Handover.Commit.class, io.engramhost.protocol.ReadyFile.class, JsonReader.class,
                io.engramhost.json.JsonWriter.class, io.engramhost.os.NonBlocking.class)) {
            try {
                Class.forName(c.getName(), true, c.getClassLoader());
            } catch (ClassNotFoundException | LinkageError e) {
                LOG.log(System.Logger.Level.DEBUG, () -> "takeover warm-up: " + e);
            }
        }
        Welcome.decode(io.engramhost.protocol.FrameReader.of(new Welcome(2, 1, Daemon.VERSION, "memfd", "warm-up",
                io.engramhost.protocol.DaemonState.READY, 0).encode()));
        UnixConnection[] pair = UnixConnection.pair("takeover warm-up");
        try (Fd memfd = Posix.memfdCreate("engram-takeover-warm-up", Posix.MFD_CLOEXEC | Posix.MFD_ALLOW_SEALING)) {
            ProtocolChannel a = new ProtocolChannel(pair[0]);
            ProtocolChannel b = new ProtocolChannel(pair[1]);
            a.send(Frames.empty(MessageType.HANDOVER_READY, 2), List.of(memfd));
            try (ProtocolChannel.Incoming in = b.receive(ProtocolDescriptor.MAX_PAYLOAD, 1, 1000)) {
                io.engramhost.os.DirFd.stat(memfd); // the copy that came with the frame is closed with it
            }
            Posix.getSeals(memfd);
            io.engramhost.os.UnixSockets.notListeningOn(pair[0].fd(), Path.of("/"));
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.DEBUG, () -> "takeover warm-up: " + e.getMessage());
        } finally {
            pair[0].close();
            pair[1].close();
        }
    }

    private static Daemon converse(DaemonContext context, Path socket, boolean verifyDigests, ProtocolChannel ch,
            PeerCredentials peer, long t0) {
        Welcome welcome;
        Handover.Catalog handed;
        List<Fd> fds;
        try {
            ch.send(new Hello(2, ProtocolDescriptor.MAX_VERSION, Posix.getpid(), "engram-host successor").encode());
            try (ProtocolChannel.Incoming in = ch.receive(0, CATALOG_TIMEOUT_MILLIS)) {
                welcome = Welcome.decode(refuseError(in, socket));
                step(t0, "WELCOME");
            }
            ch.send(Handover.Takeover.ofThisBuild(Daemon.VERSION).encode());
            try (ProtocolChannel.Incoming in = ch.receive(ProtocolDescriptor.MAX_PAYLOAD, ProtocolDescriptor.MAX_FDS,
                    CATALOG_TIMEOUT_MILLIS)) {
                refuseError(in, socket);
                if (in.type() != MessageType.HANDOVER_CATALOG) {
                    throw new IllegalStateException("takeover failed: expected HANDOVER_CATALOG, got " + in.type());
                }
                byte[] frame = in.frame();
                handed = Handover.Catalog.decode(frame, in.fdCount());
                fds = in.takeFds();
                step(t0, "catalog received");
            }
        } catch (PeerClosedException e) {
            throw new PredecessorGoneException("the daemon on " + socket + " closed the connection before it handed"
                    + " anything over (it exited, or was killed)");
        }
        LOG.log(INFO, "taking over from pid " + welcome.pid() + " (" + welcome.daemonVersion() + ", " + handed.backend()
                + "): " + handed.regionCount() + " region fds, fingerprint " + handed.fingerprintSha256()
                + (verifyDigests ? "; verifying every digest" : ""));
        UnixListener listener;
        Catalog catalog;
        try {
            listener = UnixListener.adopt(fds.get(0), socket);
        } catch (RuntimeException e) {
            fds.subList(1, fds.size()).forEach(Fd::close);
            abort(ch, e.getMessage());
            throw new IllegalStateException("takeover refused by this successor: " + e.getMessage(), e);
        }
        try {
            if (!handed.backend().equals(context.backend().wireName())) {
                throw new IllegalStateException("the daemon serves backend " + handed.backend() + ", this successor was"
                        + " started with --backend " + context.backend().wireName());
            }
            catalog = AdoptedCatalog.adopt(handed, fds.subList(1, fds.size()), verifyDigests);
            step(t0, "catalog checked");
        } catch (RuntimeException e) {
            fds.subList(1, fds.size()).forEach(Fd::close);
            listener.close();
            abort(ch, e.getMessage());
            throw new IllegalStateException("takeover refused by this successor: " + e.getMessage(), e);
        }
        Map<String, Object> report = parseReport(handed.report());
        gate("catalog");
        try {
            ch.send(Frames.empty(MessageType.HANDOVER_READY, 2));
            step(t0, "READY sent");
            return commit(context, socket, ch, welcome, listener, catalog, report, t0);
        } catch (PeerClosedException | io.engramhost.os.ReceiveTimeoutException e) {
            return orphaned(context, socket, welcome.pid(), listener, catalog, report, t0, e.getMessage());
        }
    }

    /** Receives the commit, takes the lock and connections, confirms: the commit point. */
    private static Daemon commit(DaemonContext context, Path socket, ProtocolChannel ch, Welcome welcome,
            UnixListener listener, Catalog catalog, Map<String, Object> report, long t0) {
        Handover.Commit commit;
        List<Fd> fds;
        try (ProtocolChannel.Incoming in = ch.receive(ProtocolDescriptor.MAX_PAYLOAD, ProtocolDescriptor.MAX_FDS,
                COMMIT_TIMEOUT_MILLIS)) {
            if (in.type() != MessageType.HANDOVER_COMMIT) {
                throw new ProtocolException("expected HANDOVER_COMMIT, got " + in.type());
            }
            commit = Handover.Commit.decode(in.frame(), in.fdCount());
            fds = in.takeFds();
            step(t0, "COMMIT received");
        } catch (RuntimeException e) {
            if (e instanceof PeerClosedException || e instanceof io.engramhost.os.ReceiveTimeoutException) {
                throw e;
            }
            listener.close();
            closeQuietly(catalog);
            abort(ch, e.getMessage());
            throw new IllegalStateException("takeover refused by this successor: " + e.getMessage(), e);
        }
        DaemonLock lock;
        try {
            lock = DaemonLock.adopt(fds.get(0), RuntimeDir.prepare(socket.getParent(), !context.allowUids().isEmpty()),
                    socket);
        } catch (RuntimeException e) {
            fds.subList(1, fds.size()).forEach(Fd::close);
            listener.close();
            closeQuietly(catalog);
            abort(ch, e.getMessage());
            throw new IllegalStateException("takeover refused by this successor: " + e.getMessage(), e);
        }
        List<SessionLoop.Quiet> connections = new ArrayList<>();
        Map<Long, Instant> since = new HashMap<>();
        for (int i = 0; i < commit.connections().size(); i++) {
            Handover.Connection c = commit.connections().get(i);
            connections.add(new SessionLoop.Quiet(fds.get(i + 1), Connection.Phase.values()[c.phase()], c.version(),
                    new PeerCredentials(c.pid(), c.uid(), c.gid()), c.leaseId()));
            if (c.leaseId() > 0) {
                since.put(c.leaseId(), Instant.ofEpochSecond(0, c.leaseSinceNanos()));
            }
        }
        gate("commit");
        try {
            ch.send(Frames.empty(MessageType.HANDOVER_DONE, 2));
            step(t0, "DONE sent: committed");
        } catch (PeerClosedException e) {
            LOG.log(WARNING, "the predecessor pid " + welcome.pid() + " is gone since it committed; serving on");
        }
        Map<String, Object> origin = origin("takeover", welcome.pid(), t0);
        Daemon d = Daemon.adopted(context, socket, lock, listener, catalog, connections, since, commit.nextLeaseId(),
                report, origin);
        LOG.log(INFO, "took over from pid " + welcome.pid() + " in " + origin.get("handover_ms") + " ms: "
                + catalog.allTables().size() + " tables, " + connections.size() + " connections ("
                + since.size() + " leases); 0 bytes read from the checkpoint");
        return d;
    }

    /**
     * The predecessor died after sending its catalog but before its commit: this process holds the tables and
     * the listening socket, so it takes the lock as a new daemon would (refused while another daemon holds it)
     * and serves them. The predecessor's leases ended with it.
     */
    private static Daemon orphaned(DaemonContext context, Path socket, int predecessor, UnixListener listener,
            Catalog catalog, Map<String, Object> report, long t0, String why) {
        LOG.log(WARNING, "the predecessor pid " + predecessor + " stopped answering before its commit (" + why
                + "); taking the lock and serving the tables it handed over");
        DaemonLock lock;
        try {
            DaemonLock.AlreadyRunningException last = null;
            for (int i = 0; i < 100; i++) {
                try {
                    lock = DaemonLock.acquire(RuntimeDir.prepare(socket.getParent(), !context.allowUids().isEmpty()),
                            socket);
                    last = null;
                    Map<String, Object> origin = origin("takeover-orphaned", predecessor, t0);
                    return Daemon.adopted(context, socket, lock, listener, catalog, List.of(), Map.of(), 1, report,
                            origin);
                } catch (DaemonLock.AlreadyRunningException e) {
                    last = e; // the predecessor may still be exiting: its lock goes with its last fd
                    Thread.sleep(50);
                }
            }
            throw last;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            listener.close();
            closeQuietly(catalog);
            throw new IllegalStateException("interrupted while taking the lock", e);
        } catch (RuntimeException e) {
            listener.close();
            closeQuietly(catalog);
            throw new IllegalStateException("takeover failed: the predecessor stopped answering and the lock stays"
                    + " taken: " + e.getMessage(), e);
        }
    }

    /** STATUS's {@code origin} of a daemon that read nothing from the checkpoint; {@code from} -1: pid unknown. */
    /** DEBUG: how far the takeover is, in ms since it asked. */
    private static void step(long t0, String what) {
        LOG.log(System.Logger.Level.DEBUG, () -> String.format("takeover: %s at %.1f ms", what,
                (System.nanoTime() - t0) / 1e6));
    }

    static Map<String, Object> origin(String how, int from, long t0) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("how", how);
        if (from > 0) {
            o.put("from_pid", from);
        }
        o.put("checkpoint_bytes_read", 0L);
        o.put("handover_ms", Math.round((System.nanoTime() - t0) / 1e4) / 100.0);
        return o;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> parseReport(String json) {
        try {
            Object o = JsonReader.parse(json);
            return o instanceof Map<?, ?> m ? new LinkedHashMap<>((Map<String, Object>) m) : new LinkedHashMap<>();
        } catch (RuntimeException e) {
            return new LinkedHashMap<>();
        }
    }

    /** An ERROR from the predecessor ends the takeover with its message; otherwise the frame's reader. */
    private static io.engramhost.protocol.FrameReader refuseError(ProtocolChannel.Incoming in, Path socket) {
        if (in.type() == MessageType.ERROR) {
            ErrorReply e = ErrorReply.decode(in.reader());
            throw new IllegalStateException("the daemon on " + socket + " refused: " + e.message());
        }
        return in.reader();
    }

    private static void abort(ProtocolChannel ch, String reason) {
        try {
            ch.send(Handover.abort(String.valueOf(reason)));
        } catch (RuntimeException ignored) {
            // the predecessor may be gone; it serves on either way
        }
    }

    private static void closeQuietly(Catalog c) {
        try {
            c.close();
        } catch (Exception e) {
            LOG.log(WARNING, "freeing the tables handed over failed: " + e.getMessage());
        }
    }

    /** TEST ONLY ({@link #TEST_GATE}). */
    private static void gate(String step) {
        io.engramhost.store.TestGate.hold(TEST_GATE, step, "takeover");
    }
}
