package io.engramhost.daemon.handover;

import static java.lang.System.Logger.Level.DEBUG;
import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.daemon.launch.Adoption;
import io.engramhost.daemon.launch.DaemonLock;
import io.engramhost.daemon.launch.PreparedLoad;
import io.engramhost.daemon.launch.SocketClaim;
import io.engramhost.daemon.loop.HandedConnection;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Fd;
import io.engramhost.os.NativeException;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.ReceiveTimeoutException;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Handover;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import io.engramhost.protocol.RegionKind;
import io.engramhost.protocol.Welcome;
import io.engramhost.store.AdoptedCatalog;
import io.engramhost.store.Catalog;
import io.engramhost.store.LoadReport;
import io.engramhost.util.BuildInfo;
import io.engramhost.util.Closer;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import java.util.function.IntPredicate;
import java.util.function.Supplier;

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
     * What a successor is started with: the socket it takes over ({@code allowUids}: the other uids admitted, for
     * whom its directory is made reachable), the backend it must serve, whether it rehashes what it gets ({@code --verify-digests}), which uid
     * it may take over from ({@code mayStop}: its own or root), where the hooks step in, and the load it falls back
     * on when the tables handed over are kept no longer ({@code reload}, asked at most once).
     */
    public record Settings(Path socket, Set<Integer> allowUids, Backend backend, boolean verifyDigests,
            IntPredicate mayStop, DaemonHooks hooks, Supplier<PreparedLoad> reload) {
    }

    /** A catalog as received: the frame decoded, the listening socket (fd 0) and the region fds, owned. */
    private record Received(Handover.Catalog catalog, Fd listener, List<Fd> regions) {
    }

    /** A commit as received: the lock's fd and the connections' fds, owned. */
    private record Committed(Handover.Commit commit, Fd lock, List<Fd> connections) {
    }

    /**
     * Takes over from the daemon on {@code settings}'s socket: what this process then serves, past the commit point.
     *
     * @throws PredecessorGoneException when there is no daemon to take over from (nothing was taken)
     * @throws IllegalStateException with one line when the takeover is refused or what was handed over fails a
     *     check; the predecessor then keeps serving
     */
    public static Adoption run(Settings settings) {
        rehearse();
        settings.hooks().reached(DaemonHooks.Point.TAKEOVER_REQUEST);
        long t0 = System.nanoTime();
        Path socket = settings.socket();
        UnixConnection conn;
        try {
            conn = UnixConnection.connect(socket);
        } catch (NativeException e) {
            if (UnixSockets.noListener(e.errno())) {
                throw new PredecessorGoneException("no daemon listens on " + socket + " (" + e.getMessage() + ")");
            }
            throw e;
        }
        try (ProtocolChannel ch = new ProtocolChannel(conn)) {
            PeerCredentials peer = conn.peerCredentials();
            if (!settings.mayStop().test(peer.uid())) {
                throw new IllegalStateException("takeover refused: the daemon on " + socket + " runs as uid "
                        + peer.uid() + "; only its own uid or root may take it over");
            }
            return converse(settings, ch, t0);
        }
    }

    private static Adoption converse(Settings settings, ProtocolChannel ch, long t0) {
        Path socket = settings.socket();
        Welcome welcome;
        Received got;
        try {
            ch.send(new Hello(2, ProtocolDescriptor.MAX_VERSION, Posix.getpid(), "engram-host successor").encode());
            try (ProtocolChannel.Incoming in = ch.receive(0, CATALOG_TIMEOUT_MILLIS)) {
                welcome = Welcome.decode(refuseError(in, socket));
                step(t0, "WELCOME");
            }
            ch.send(Handover.Takeover.ofThisBuild(BuildInfo.version()).encode());
            got = receiveCatalog(ch, socket);
            step(t0, "catalog received");
        } catch (PeerClosedException e) {
            throw new PredecessorGoneException("the daemon on " + socket + " closed the connection before it handed"
                    + " anything over (it exited, or was killed)");
        }
        Handover.Catalog handed = got.catalog();
        LOG.log(INFO, "taking over from pid " + welcome.pid() + " (" + welcome.daemonVersion() + ", " + handed.backend()
                + "): " + handed.regionCount() + " region fds, fingerprint " + handed.fingerprintSha256()
                + (settings.verifyDigests() ? "; verifying every digest" : ""));
        UnixListener listener;
        Catalog catalog;
        LoadReport report;
        try {
            listener = UnixListener.adopt(got.listener(), socket, SocketClaim.BACKLOG);
        } catch (RuntimeException e) {
            got.regions().forEach(Fd::close);
            throw refuse(ch, e);
        }
        try {
            if (!handed.backend().equals(settings.backend().wireName())) {
                throw new IllegalStateException("the daemon serves backend " + handed.backend() + ", this successor was"
                        + " started with --backend " + settings.backend().wireName() + ": start it with --backend "
                        + handed.backend() + " (a takeover keeps the backend; another one needs a stop and a load)");
            }
            report = LoadReport.parse(handed.report());
            catalog = AdoptedCatalog.adopt(handed, got.regions(), settings.verifyDigests());
            step(t0, "catalog checked");
        } catch (RuntimeException e) {
            got.regions().forEach(Fd::close);
            listener.close();
            throw refuse(ch, e);
        }
        Tables tables;
        try {
            tables = tablesToServe(settings, catalog, report);
        } catch (RuntimeException e) {
            listener.close();
            throw refuse(ch, e);
        }
        settings.hooks().reached(DaemonHooks.Point.TAKEOVER_CATALOG);
        try {
            ch.send(Frames.empty(MessageType.HANDOVER_READY, 2));
            step(t0, "READY sent");
            return commit(settings, ch, welcome.pid(), listener, tables, t0);
        } catch (PeerClosedException | ReceiveTimeoutException e) {
            return orphaned(settings, welcome.pid(), listener, tables, t0, e.getMessage());
        }
    }

    /**
     * What the successor serves: the catalog handed over, and the report that came with it; or, when a build before
     * WRITE sealed it ({@link AdoptedCatalog#sealedBeforeWrite}), a load of the checkpoint instead (once: the tables
     * it makes carry WRITE), said in one line. The socket, the connections and the leases move over either way.
     */
    private record Tables(Catalog catalog, PreparedLoad reload, LoadReport report) implements AutoCloseable {
        @Override
        public void close() {
            Closer.closeAll(catalog, reload == null ? null : reload.builder());
        }
    }

    private static Tables tablesToServe(Settings settings, Catalog catalog, LoadReport report) {
        String older;
        try {
            older = AdoptedCatalog.sealedBeforeWrite(catalog);
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, catalog);
            throw e;
        }
        if (older == null) {
            return new Tables(catalog, null, report);
        }
        Closer.closeAll(catalog);
        LOG.log(WARNING, "the tables handed over are kept no longer: " + older + ": taking over the socket, the"
                + " connections and the leases, and loading the checkpoint once");
        PreparedLoad reload = settings.reload().get();
        return new Tables(null, reload, reload.report());
    }

    /** The adoption past the commit point: the tables handed over, or the load that replaces them. */
    private static Adoption adoption(DaemonLock lock, UnixListener listener, Tables tables,
            List<HandedConnection> connections, long nextLeaseId, LoadReport.Origin origin) {
        return tables.catalog() != null
                ? new Adoption(lock, listener, tables.catalog(), null, connections, nextLeaseId,
                        tables.report().withOrigin(origin))
                : new Adoption(lock, listener, null, tables.reload().builder(), connections, nextLeaseId,
                        tables.report());
    }

    /** HANDOVER_CATALOG, decoded, with its fds: fd 0 the listening socket, then the regions. */
    private static Received receiveCatalog(ProtocolChannel ch, Path socket) {
        try (ProtocolChannel.Incoming in = ch.receive(ProtocolDescriptor.MAX_PAYLOAD, ProtocolDescriptor.MAX_FDS,
                CATALOG_TIMEOUT_MILLIS)) {
            refuseError(in, socket);
            if (in.type() != MessageType.HANDOVER_CATALOG) {
                throw new IllegalStateException("takeover failed: expected HANDOVER_CATALOG, got " + in.type());
            }
            Handover.Catalog handed = Handover.Catalog.decode(in.frame(), in.fdCount());
            List<Fd> fds = in.takeFds();
            return new Received(handed, fds.get(0), fds.subList(1, fds.size()));
        }
    }

    /** HANDOVER_COMMIT, decoded, with its fds: fd 0 the lock, then the connections. */
    private static Committed receiveCommit(ProtocolChannel ch) {
        try (ProtocolChannel.Incoming in = ch.receive(ProtocolDescriptor.MAX_PAYLOAD, ProtocolDescriptor.MAX_FDS,
                COMMIT_TIMEOUT_MILLIS)) {
            if (in.type() != MessageType.HANDOVER_COMMIT) {
                throw new ProtocolException("expected HANDOVER_COMMIT, got " + in.type());
            }
            Handover.Commit commit = Handover.Commit.decode(in.frame(), in.fdCount());
            List<Fd> fds = in.takeFds();
            return new Committed(commit, fds.get(0), fds.subList(1, fds.size()));
        }
    }

    /** Receives the commit, takes the lock and connections, confirms: the commit point. */
    private static Adoption commit(Settings settings, ProtocolChannel ch, int predecessor, UnixListener listener,
            Tables tables, long t0) {
        Committed got;
        try {
            got = receiveCommit(ch);
            step(t0, "COMMIT received");
        } catch (PeerClosedException | ReceiveTimeoutException e) {
            throw e;
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, tables, listener);
            throw refuse(ch, e);
        }
        DaemonLock lock;
        try {
            lock = SocketClaim.adopt(got.lock(), settings.socket(), settings.allowUids());
        } catch (RuntimeException e) {
            got.connections().forEach(Fd::close);
            Closer.closeAllAfter(e, tables, listener);
            throw refuse(ch, e);
        }
        List<HandedConnection> connections = new ArrayList<>();
        int leases = 0;
        for (int i = 0; i < got.commit().connections().size(); i++) {
            Handover.Connection c = got.commit().connections().get(i);
            connections.add(new HandedConnection(got.connections().get(i), c.phase(), c.version(),
                    new PeerCredentials(c.pid(), c.uid(), c.gid()), c.leaseId(),
                    Instant.ofEpochSecond(0, c.leaseSinceNanos())));
            leases += c.leaseId() > 0 ? 1 : 0;
        }
        settings.hooks().reached(DaemonHooks.Point.TAKEOVER_COMMIT);
        try {
            ch.send(Frames.empty(MessageType.HANDOVER_DONE, 2));
            step(t0, "DONE sent: committed");
        } catch (PeerClosedException e) {
            LOG.log(WARNING, "the predecessor pid " + predecessor + " is gone since it committed; serving on");
        }
        lock.claim(); // past the commit point: the lock file names this process from here on
        LoadReport.Origin origin = LoadReport.Origin.handedOver(LoadReport.How.TAKEOVER, predecessor, t0, null);
        LOG.log(INFO, "took over from pid " + predecessor + " in " + origin.handoverMillis() + " ms: "
                + (tables.catalog() != null ? tables.catalog().allTables().size() + " tables, " : "")
                + connections.size() + " connections (" + leases + " leases); "
                + (tables.catalog() != null ? "0 bytes read from the checkpoint" : "loading the checkpoint"));
        return adoption(lock, listener, tables, connections, got.commit().nextLeaseId(), origin);
    }

    /**
     * The predecessor died after sending its catalog but before its commit: this process holds the tables and
     * the listening socket, so it takes the lock as a new daemon would (refused while another daemon holds it)
     * and serves them. The predecessor's leases ended with it.
     */
    private static Adoption orphaned(Settings settings, int predecessor, UnixListener listener, Tables tables,
            long t0, String why) {
        LOG.log(WARNING, "the predecessor pid " + predecessor + " stopped answering before its commit (" + why
                + "); taking the lock and serving the tables it handed over");
        try {
            DaemonLock lock = SocketClaim.lockAfter(predecessor, settings.socket(), settings.allowUids());
            LoadReport.Origin origin = LoadReport.Origin.handedOver(LoadReport.How.TAKEOVER_ORPHANED, predecessor, t0,
                    null);
            return adoption(lock, listener, tables, List.of(), 1, origin);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            Closer.closeAllAfter(e, tables, listener);
            throw new IllegalStateException("interrupted while taking the lock", e);
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, tables, listener);
            throw new IllegalStateException("takeover failed: the predecessor stopped answering and the lock stays"
                    + " taken: " + e.getMessage(), e);
        }
    }

    /**
     * Runs a takeover through, both sides in this process over a socketpair, on a catalog of one small memfd (the
     * predecessor's sending code, then this side's receiving and checking code), so that the first-use costs of that
     * code (class loading, JNR's stubs) are paid while the predecessor still serves, not between its freeze and its
     * commit. What fails here is logged at DEBUG: the real takeover then says what is wrong.
     */
    static void rehearse() {
        UnixConnection[] pair = UnixConnection.pair("takeover rehearsal");
        Closer<AutoCloseable> owned = new Closer<>();
        try (ProtocolChannel predecessor = new ProtocolChannel(pair[0]);
                ProtocolChannel successor = new ProtocolChannel(pair[1])) {
            MemfdRegion region = owned.add(MemfdRegion.create("engram-takeover-rehearsal", Posix.pageSize(),
                    PageKind.SMALL, null));
            region.seal();
            Fingerprint fp = new Fingerprint(Fingerprint.LAYOUT_VERSION, "memfd", List.of(), List.of(),
                    List.of(new Fingerprint.Table("rehearsal", DType.U8, new long[] {1}, 1)));
            Manifest manifest = new Manifest(HexFormat.of().parseHex(fp.sha256Hex()), fp.canonicalBytes(),
                    List.of(new Manifest.Region(RegionKind.MEMFD, Posix.pageSize(), 0, -1)),
                    List.of(new Manifest.Table("rehearsal", "U8", new long[] {1}, 1, 0, 0, 0, RegionKind.MEMFD, 0, -1)));
            Catalog tiny = new Catalog(manifest, List.of(region.fd()), fp.sha256Hex(), e -> List.of(), "memfd", () -> { });
            HandoverSender.sendCatalog(predecessor, CatalogFrame.of(tiny, LoadReport.EMPTY.encode()),
                    region.fd());
            Received got = receiveCatalog(successor, Path.of("/"));
            owned.add(got.listener());
            LoadReport.parse(got.catalog().report());
            owned.add(AdoptedCatalog.adopt(got.catalog(), got.regions(), false));
            successor.send(Frames.empty(MessageType.HANDOVER_READY, 2));
            HandoverSender.expect(predecessor, MessageType.HANDOVER_READY, 1000);
            predecessor.send(ByteBuffer.wrap(new Handover.Commit(1, List.of()).encode()), List.of(region.fd()));
            Committed c = receiveCommit(successor);
            owned.add(c.lock());
            successor.send(Frames.empty(MessageType.HANDOVER_DONE, 2));
            HandoverSender.expect(predecessor, MessageType.HANDOVER_DONE, 1000);
        } catch (RuntimeException e) {
            LOG.log(DEBUG, () -> "takeover rehearsal: " + e);
        } finally {
            try {
                owned.close();
            } catch (RuntimeException e) {
                LOG.log(DEBUG, () -> "takeover rehearsal, closing: " + e);
            }
        }
    }

    /** DEBUG: how far the takeover is, in ms since it asked. */
    private static void step(long t0, String what) {
        LOG.log(DEBUG, () -> String.format("takeover: %s at %.1f ms", what, (System.nanoTime() - t0) / 1e6));
    }

    /** An ERROR from the predecessor ends the takeover with its message; otherwise the frame's reader. */
    private static FrameReader refuseError(ProtocolChannel.Incoming in, Path socket) {
        if (in.type() == MessageType.ERROR) {
            ErrorReply e = ErrorReply.decode(in.reader());
            throw new IllegalStateException("the daemon on " + socket + " refused: " + e.message());
        }
        return in.reader();
    }

    /** Tells the predecessor why this successor refuses (it serves on either way), and says so in one line. */
    private static IllegalStateException refuse(ProtocolChannel ch, RuntimeException why) {
        try {
            ch.send(Handover.abort(String.valueOf(why.getMessage())));
        } catch (RuntimeException ignored) {
            // the predecessor may be gone; it serves on either way
        }
        return new IllegalStateException("takeover refused by this successor: " + why.getMessage(), why);
    }
}
