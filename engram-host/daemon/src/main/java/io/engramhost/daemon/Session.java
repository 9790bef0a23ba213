package io.engramhost.daemon;

import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.ReceiveTimeoutException;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.Welcome;
import io.engramhost.store.Catalog;
import java.util.List;

/**
 * One client connection, from accept to either a lease or a close. Every read has a timeout, and
 * whatever the client does (garbage, a crash, silence) ends only this session.
 */
final class Session implements Runnable {
    private final UnixConnection connection;
    private final Daemon daemon;
    private final int timeoutMillis;

    Session(UnixConnection connection, Daemon daemon, int timeoutMillis) {
        this.connection = connection;
        this.daemon = daemon;
        this.timeoutMillis = timeoutMillis;
    }

    @Override
    public void run() {
        ProtocolChannel channel = new ProtocolChannel(connection);
        PeerCredentials peer = null;
        boolean leased = false;
        int version = ProtocolDescriptor.MIN_VERSION;
        try {
            peer = connection.peerCredentials();
            if (!daemon.context().admits(peer.uid())) {
                DaemonLog.warn("refused pid " + peer.pid() + ": uid " + peer.uid() + " is not admitted (--allow-uid)");
                channel.send(ErrorReply.of(ErrorCode.NOT_ALLOWED, "uid " + peer.uid() + " is not admitted by this daemon;"
                        + " the operator can add it with --allow-uid").encode(version));
                return;
            }
            try (ProtocolChannel.Incoming in = channel.receive(ProtocolDescriptor.MAX_REQUEST, 0, timeoutMillis)) {
                if (in.type() != MessageType.HELLO) {
                    throw new IllegalArgumentException("expected HELLO, got " + in.type());
                }
                Hello hello = Hello.decode(in.reader());
                version = ProtocolDescriptor.negotiate(hello.minVersion(), hello.maxVersion());
                if (version < 0) {
                    version = ProtocolDescriptor.MIN_VERSION;
                    channel.send(ErrorReply.of(ErrorCode.UNSUPPORTED_VERSION, "daemon speaks protocol versions "
                            + ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION + ", client "
                            + hello.minVersion() + "-" + hello.maxVersion()).encode(version));
                    return;
                }
                channel.send(new Welcome(version, daemon.pid(), Daemon.VERSION, daemon.context().backend(),
                        daemon.context().instanceName(), daemon.state()).encode());
            }
            while (true) {
                try (ProtocolChannel.Incoming in = channel.receive(ProtocolDescriptor.MAX_REQUEST, 0, timeoutMillis)) {
                    switch (in.type()) {
                        case IMPORT -> {
                            if (serveImport(channel, ImportRequest.decode(in.reader()), version)) {
                                daemon.leases().add(connection, peer);
                                leased = true;
                                return;
                            }
                        }
                        case STATUS -> {
                            in.reader().end();
                            channel.send(Frames.statusReply(version, daemon.statusJson()));
                        }
                        case STOP -> {
                            in.reader().end();
                            if (!daemon.context().mayStop(peer.uid())) {
                                channel.send(ErrorReply.of(ErrorCode.NOT_ALLOWED, "only uid " + daemon.uid()
                                        + " (the daemon's) or root may stop it").encode(version));
                                continue;
                            }
                            channel.send(Frames.empty(MessageType.STOP_ACK, version));
                            daemon.requestStop("stop requested by pid " + peer.pid());
                            return;
                        }
                        case BYE -> {
                            return;
                        }
                        default -> throw new IllegalArgumentException("unexpected " + in.type() + " from a client");
                    }
                }
            }
        } catch (PeerClosedException e) {
            // The client went away: nothing to clean up but the connection.
        } catch (ReceiveTimeoutException e) {
            DaemonLog.warn("closed a connection of pid " + pidOf(peer) + ": " + e.getMessage() + " after "
                    + timeoutMillis + " ms");
        } catch (RuntimeException e) {
            DaemonLog.warn("closed a connection of pid " + pidOf(peer) + ": " + e.getMessage());
            trySend(channel, ErrorReply.of(ErrorCode.BAD_REQUEST, String.valueOf(e.getMessage())), version);
        } finally {
            if (!leased) {
                connection.close();
            }
        }
    }

    /** Sends the manifest with the fds; false when the import was refused (an ERROR was sent). */
    private boolean serveImport(ProtocolChannel channel, ImportRequest request, int version) {
        DaemonState state = daemon.state();
        if (state == DaemonState.LOADING) {
            channel.send(ErrorReply.of(ErrorCode.NOT_READY, "daemon is loading: " + daemon.progressText()).encode(version));
            return false;
        }
        if (state != DaemonState.READY) {
            channel.send(ErrorReply.of(state == DaemonState.FAILED ? ErrorCode.LOAD_FAILED : ErrorCode.STOPPING,
                    "daemon is " + state.wireName()).encode(version));
            return false;
        }
        Catalog catalog = daemon.catalog();
        List<String> differences = catalog.differences(request.expectation());
        if (!differences.isEmpty()) {
            channel.send(new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, "fingerprint mismatch: the daemon serves "
                    + catalog.fingerprintSha256(), differences, catalog.manifest().fingerprint()).encode(version));
            return false;
        }
        Catalog.Served served = catalog.servedTo(request.device());
        channel.send(served.manifest().encode(version), served.fds());
        return true;
    }

    private static void trySend(ProtocolChannel channel, ErrorReply reply, int version) {
        try {
            channel.send(reply.encode(version));
        } catch (RuntimeException ignored) {
            // the peer may be gone already
        }
    }

    private static String pidOf(PeerCredentials peer) {
        return peer == null ? "?" : String.valueOf(peer.pid());
    }
}
