package io.engramhost.daemon.loop;

import io.engramhost.os.PeerCredentials;
import io.engramhost.protocol.ConnectionPhase;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameHeader;
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
import java.util.concurrent.Semaphore;

/**
 * Answers one complete request, on a worker thread: checks the frame ({@link FrameHeader}, the one check the poll
 * loop made on its header already), decodes it strictly (docs/protocol.md), decides, and encodes the answer. It
 * never touches a socket: the poll loop writes the answer. It sees the daemon only as {@link Served}.
 */
public final class Requests implements SessionLoop.Handler {
    /** What a request is answered from: the daemon's state, its answers once ready, and what a request may ask of it. */
    public interface Served {
        DaemonState state();

        /** The ready catalog's answers (null unless ready). */
        Answers answers();

        /** How far the load is, for NOT_READY. */
        String loadingText();

        /** WELCOME in {@code version}. */
        Welcome welcome(int version);

        /** STATUS_REPLY in {@code version}. */
        List<Parts.Slice> status(int version);

        /** A STOP's answer was written. */
        void stop(String reason);
    }

    /** The one handover slot a TAKEOVER asks for (the daemon's {@code HandoverSender}). */
    public interface TakeoverSlot {
        /** Claims the slot for {@code peer}; false while another takeover holds it. */
        boolean reserve(PeerCredentials peer, Handover.Takeover t);

        /** A TAKEOVER of {@code peer} refused, {@code why} in one line (logged). */
        void refused(PeerCredentials peer, String why);
    }

    /** Requests over 1 MiB (IMPORTs with a large expectation) are answered one at a time, so their copies stay few. */
    private static final int LARGE_REQUEST = 1 << 20;

    private final Services services;
    private final Served served;
    private final TakeoverSlot handovers;
    private final int uid;
    private final Semaphore largeRequests = new Semaphore(1);

    public Requests(Services services, Served served, TakeoverSlot handovers, int uid) {
        this.services = services;
        this.served = served;
        this.handovers = handovers;
        this.uid = uid;
    }

    @Override
    public Answer handle(ConnectionPhase phase, int version, PeerCredentials peer, byte[] payload) {
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

    private Answer decide(ConnectionPhase phase, int version, PeerCredentials peer, byte[] payload) {
        int v = phase.frameVersion(version);
        try {
            MessageType type = FrameHeader.checkRequest(phase, version, payload, payload.length);
            FrameReader r = FrameReader.of(payload);
            return switch (type) {
                case HELLO -> hello(Hello.decode(r));
                case IMPORT -> serveImport(ImportRequest.decode(r), version);
                case STATUS -> Answer.of(Outbound.frame(served.status(version), version, List.of()), Answer.Next.SESSION,
                        version);
                case STOP -> stop(peer, version);
                case BYE -> Answer.of(null, Answer.Next.CLOSE, version);
                case TAKEOVER -> takeover(Handover.Takeover.decode(r), version, peer);
                default -> throw new ProtocolException(type + " is not a request a client may send now");
            };
        } catch (ProtocolException | IllegalArgumentException e) {
            services.stats().badRequests.incrementAndGet();
            services.stats().warnOnce(peer, "bad-request", "closed a connection of pid " + peer.pid() + ": "
                    + e.getMessage());
            return Answer.error(ErrorReply.of(ErrorCode.BAD_REQUEST, String.valueOf(e.getMessage())), Answer.Next.CLOSE,
                    v);
        }
    }

    private Answer hello(Hello hello) {
        int version = ProtocolDescriptor.negotiate(hello.minVersion(), hello.maxVersion());
        if (version < 0) {
            return Answer.error(ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "daemon speaks protocol versions "
                    + ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION + ", client "
                    + hello.minVersion() + "-" + hello.maxVersion()), Answer.Next.CLOSE, 1);
        }
        return Answer.of(Outbound.frame(served.welcome(version).encode(), version), Answer.Next.SESSION, version);
    }

    private Answer stop(PeerCredentials peer, int version) {
        if (!services.mayStop().test(peer.uid())) {
            return Answer.error(ErrorReply.of(ErrorCode.NOT_ALLOWED, "only uid " + uid + " (the daemon's) or root may"
                    + " stop it"), Answer.Next.SESSION, version);
        }
        return new Answer(Outbound.frame(Frames.empty(MessageType.STOP_ACK, version), version), Answer.Next.CLOSE,
                version, () -> served.stop("stop requested by pid " + peer.pid()));
    }

    /**
     * A successor asks to take over (docs/protocol.md, "Handing over to a successor daemon"). Refused with one
     * line for another uid, an incompatible build, a daemon that is not ready, or a handover already under way;
     * else the connection leaves the loop for the handover thread (the {@link SessionLoop.Detach}'s).
     */
    private Answer takeover(Handover.Takeover t, int version, PeerCredentials peer) {
        String incompatible = t.incompatibility(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION);
        DaemonState state = served.state();
        ErrorReply refusal = null;
        if (!services.mayStop().test(peer.uid())) {
            refusal = ErrorReply.of(ErrorCode.NOT_ALLOWED, "takeover refused: only uid " + uid
                    + " (the daemon's) or root may take it over, not uid " + peer.uid());
        } else if (version < 2) {
            refusal = ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "takeover refused: a takeover needs protocol"
                    + " version 2");
        } else if (incompatible != null) {
            refusal = ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "takeover refused: " + incompatible);
        } else if (state != DaemonState.READY) {
            refusal = ErrorReply.of(state == DaemonState.LOADING ? ErrorCode.NOT_READY : ErrorCode.STOPPING,
                    "takeover refused: the daemon is " + state.wireName());
        } else if (!handovers.reserve(peer, t)) {
            refusal = ErrorReply.of(ErrorCode.BUSY, "takeover refused: another takeover is under way");
        }
        if (refusal != null) {
            handovers.refused(peer, refusal.message());
            return Answer.error(refusal, Answer.Next.CLOSE, version);
        }
        return Answer.of(null, Answer.Next.DETACH, version);
    }

    private Answer serveImport(ImportRequest request, int version) {
        long taken = services.clock().getAsLong();
        DaemonState state = served.state();
        if (state == DaemonState.LOADING) {
            services.stats().importRefused(ErrorCode.NOT_READY);
            return Answer.error(ErrorReply.of(ErrorCode.NOT_READY, "daemon is loading: " + served.loadingText()),
                    Answer.Next.SESSION, version);
        }
        Answers answers = served.answers();
        if (state != DaemonState.READY || answers == null) {
            ErrorCode code = state == DaemonState.FAILED ? ErrorCode.LOAD_FAILED : ErrorCode.STOPPING;
            services.stats().importRefused(code);
            return Answer.error(ErrorReply.of(code, "daemon is " + state.wireName()), Answer.Next.CLOSE, version);
        }
        Catalog catalog = answers.catalog();
        List<String> differences = catalog.differences(request.expectation());
        if (!differences.isEmpty()) {
            services.stats().importRefused(ErrorCode.FINGERPRINT_MISMATCH);
            return Answer.error(new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, "fingerprint mismatch: the daemon serves "
                    + catalog.fingerprintSha256(), differences, catalog.manifest().fingerprint()), Answer.Next.SESSION,
                    version);
        }
        Catalog.Served toClient = catalog.servedTo(request.device());
        byte[] frame = answers.manifest(request.device(), version);
        services.stats().importsServed.incrementAndGet();
        ImportLatency latency = services.stats().importLatency;
        return new Answer(Outbound.frame(List.of(Parts.Slice.of(frame)), version, toClient.fds()), Answer.Next.LEASE,
                version, () -> latency.record(services.clock().getAsLong() - taken));
    }
}
