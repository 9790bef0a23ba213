package io.engramhost.daemon;

import io.engramhost.os.PeerCredentials;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Handover;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.Parts;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import io.engramhost.protocol.Welcome;
import io.engramhost.store.Catalog;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;

/**
 * Answers one complete request, on a worker thread: decodes the frame strictly (docs/protocol.md),
 * decides, and encodes the answer. It never touches a socket: the poll loop writes the answer.
 */
final class Requests {
    /** What the connection becomes once the answer is written. */
    enum Next { SESSION, LEASE, CLOSE, DETACH }

    /** An answer (null: none), what follows it, and the version the connection speaks from now on. */
    record Answer(Outbound out, Next next, int version, Runnable onWritten) {
        static Answer of(Outbound out, Next next, int version) {
            return new Answer(out, next, version, null);
        }
    }

    /** Requests over 1 MiB (IMPORTs with a large expectation) are answered one at a time, so their copies stay few. */
    private static final int LARGE_REQUEST = 1 << 20;

    private final Daemon daemon;
    private final Semaphore largeRequests = new Semaphore(1);
    /** Each manifest encoded once per version: key = device * 4 + version. */
    private final Map<Long, byte[]> manifests = new ConcurrentHashMap<>();
    private volatile Catalog manifestsOf;

    Requests(Daemon daemon) {
        this.daemon = daemon;
    }

    Answer handle(Connection.Phase phase, int version, PeerCredentials peer, byte[] payload) {
        if (payload.length <= LARGE_REQUEST) {
            return decide(phase, version, peer, payload);
        }
        largeRequests.acquireUninterruptibly();
        try {
            return decide(phase, version, peer, payload);
        } finally {
            largeRequests.release();
        }
    }

    private Answer decide(Connection.Phase phase, int version, PeerCredentials peer, byte[] payload) {
        try {
            FrameReader r = FrameReader.of(payload);
            return phase == Connection.Phase.HELLO ? hello(r) : request(r, version, peer);
        } catch (ProtocolException | IllegalArgumentException e) {
            daemon.stats().badRequests.incrementAndGet();
            daemon.stats().warnOnce(peer, "bad-request", "closed a connection of pid " + peer.pid() + ": "
                    + e.getMessage());
            int v = phase == Connection.Phase.HELLO ? 1 : version;
            return Answer.of(error(ErrorReply.of(ErrorCode.BAD_REQUEST, String.valueOf(e.getMessage())), v), Next.CLOSE, v);
        }
    }

    private Answer hello(FrameReader r) {
        if (r.type() != MessageType.HELLO) {
            throw new ProtocolException("expected HELLO first, got " + r.type());
        }
        Hello hello = Hello.decode(r);
        int version = ProtocolDescriptor.negotiate(hello.minVersion(), hello.maxVersion());
        if (version < 0) {
            return Answer.of(error(ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "daemon speaks protocol versions "
                    + ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION + ", client "
                    + hello.minVersion() + "-" + hello.maxVersion()), 1), Next.CLOSE, 1);
        }
        Welcome w = new Welcome(version, daemon.pid(), Daemon.VERSION, daemon.context().backend().wireName(),
                daemon.context().instanceName(), daemon.state(), daemon.uid());
        return Answer.of(Outbound.frame(w.encode(), version), Next.SESSION, version);
    }

    private Answer request(FrameReader r, int version, PeerCredentials peer) {
        r.requireVersion(version);
        switch (r.type()) {
            case IMPORT -> {
                return serveImport(ImportRequest.decode(r), version);
            }
            case STATUS -> {
                r.end();
                return Answer.of(Outbound.frame(daemon.statusReply(version), version, List.of()), Next.SESSION, version);
            }
            case STOP -> {
                r.end();
                if (!daemon.context().mayStop(peer.uid())) {
                    return Answer.of(error(ErrorReply.of(ErrorCode.NOT_ALLOWED, "only uid " + daemon.uid()
                            + " (the daemon's) or root may stop it"), version), Next.SESSION, version);
                }
                return new Answer(Outbound.frame(Frames.empty(MessageType.STOP_ACK, version), version), Next.CLOSE, version,
                        () -> daemon.requestStop("stop requested by pid " + peer.pid()));
            }
            case BYE -> {
                r.end();
                return Answer.of(null, Next.CLOSE, version);
            }
            case TAKEOVER -> {
                return takeover(Handover.Takeover.decode(r), version, peer);
            }
            default -> throw new ProtocolException(r.type() + " is not a request a client may send now");
        }
    }

    /**
     * A successor asks to take over (docs/protocol.md, "Handing over to a successor daemon"). Refused with one
     * line for another uid, an incompatible build, a daemon that is not ready, or a handover already under way;
     * else the connection leaves the loop for the handover thread ({@link HandoverSender}).
     */
    private Answer takeover(Handover.Takeover t, int version, PeerCredentials peer) {
        ErrorReply refusal = null;
        if (!daemon.context().mayStop(peer.uid())) {
            refusal = ErrorReply.of(ErrorCode.NOT_ALLOWED, "takeover refused: only uid " + daemon.uid()
                    + " (the daemon's) or root may take it over, not uid " + peer.uid());
        } else if (version < 2) {
            refusal = ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "takeover refused: a takeover needs protocol"
                    + " version 2");
        } else if (t.incompatibility(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION) != null) {
            refusal = ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "takeover refused: "
                    + t.incompatibility(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION));
        } else if (daemon.state() != DaemonState.READY) {
            refusal = ErrorReply.of(daemon.state() == DaemonState.LOADING ? ErrorCode.NOT_READY : ErrorCode.STOPPING,
                    "takeover refused: the daemon is " + daemon.state().wireName());
        } else if (!daemon.handoverSender().reserve(peer, t)) {
            refusal = ErrorReply.of(ErrorCode.BUSY, "takeover refused: another takeover is under way");
        }
        if (refusal != null) {
            daemon.handoverSender().refused(peer, refusal.message());
            return Answer.of(error(refusal, version), Next.CLOSE, version);
        }
        return Answer.of(null, Next.DETACH, version);
    }

    private Answer serveImport(ImportRequest request, int version) {
        long taken = System.nanoTime();
        DaemonState state = daemon.state();
        if (state == DaemonState.LOADING) {
            daemon.stats().importRefused(ErrorCode.NOT_READY);
            return Answer.of(error(ErrorReply.of(ErrorCode.NOT_READY, "daemon is loading: " + daemon.progressText()),
                    version), Next.SESSION, version);
        }
        Catalog catalog = daemon.catalog();
        if (state != DaemonState.READY || catalog == null) {
            ErrorCode code = state == DaemonState.FAILED ? ErrorCode.LOAD_FAILED : ErrorCode.STOPPING;
            daemon.stats().importRefused(code);
            return Answer.of(error(ErrorReply.of(code, "daemon is " + state.wireName()), version), Next.CLOSE, version);
        }
        List<String> differences = catalog.differences(request.expectation());
        if (!differences.isEmpty()) {
            daemon.stats().importRefused(ErrorCode.FINGERPRINT_MISMATCH);
            return Answer.of(error(new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, "fingerprint mismatch: the daemon serves "
                    + catalog.fingerprintSha256(), differences, catalog.manifest().fingerprint()), version), Next.SESSION,
                    version);
        }
        Catalog.Served served = catalog.servedTo(request.device());
        byte[] frame = manifestFrame(catalog, request.device(), served, version);
        daemon.stats().importsServed.incrementAndGet();
        ImportLatency latency = daemon.stats().importLatency;
        return new Answer(Outbound.frame(List.of(Parts.Slice.of(frame)), version, served.fds()), Next.LEASE, version,
                () -> latency.record(System.nanoTime() - taken));
    }

    private byte[] manifestFrame(Catalog catalog, int device, Catalog.Served served, int version) {
        if (manifestsOf != catalog) {
            manifests.clear();
            manifestsOf = catalog;
        }
        int key = catalog.servedTo(device) == catalog.servedTo(-1) && device != -1 ? -1 : device;
        return manifests.computeIfAbsent((long) key * 4 + version, k -> {
            java.nio.ByteBuffer encoded = served.manifest().encode(version);
            byte[] b = new byte[encoded.remaining()];
            encoded.get(b);
            return b;
        });
    }

    private static Outbound error(ErrorReply e, int version) {
        // slices: a FINGERPRINT_MISMATCH's fingerprint (up to 16 MiB) is the catalog's array, not a copy per answer
        return Outbound.frame(e.encodeSlices(version), version, List.of());
    }
}
