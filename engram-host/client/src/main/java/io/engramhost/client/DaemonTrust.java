package io.engramhost.client;

import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Welcome;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

/**
 * docs/protocol.md, "Transport": the client checks the daemon too. Whoever can create the socket path
 * can answer on it, so before a byte is sent the peer's uid (SO_PEERCRED, taken at connect) must be
 * root's, this process's effective uid or one the caller listed ({@link ClientOptions#daemonUids()},
 * {@code --daemon-uid}); in version 2, WELCOME's uid must be that same uid.
 */
final class DaemonTrust {
    private DaemonTrust() {
    }

    /** Refuses the peer unless its uid is trusted; names the uid seen, those trusted and how to widen them. */
    static void checkPeer(Path socket, PeerCredentials peer, ClientOptions options) {
        int me = Posix.geteuid();
        int uid = peer.uid();
        if (uid == 0 || uid == me || options.daemonUids().contains(uid)) {
            return;
        }
        List<String> trusted = new ArrayList<>();
        trusted.add("0 (root)");
        if (me != 0) {
            trusted.add(Integer.toUnsignedString(me) + " (this client's euid)");
        }
        for (int u : new TreeSet<>(options.daemonUids())) {
            trusted.add(Integer.toUnsignedString(u) + " (--daemon-uid)");
        }
        String u = Integer.toUnsignedString(uid);
        throw new EngramClientException("refusing the daemon on " + socket + ": its uid (SO_PEERCRED, pid " + peer.pid()
                + ") is " + u + ", and this client trusts only the uids " + String.join(", ", trusted)
                + "; if that user's daemon is meant to serve you, add --daemon-uid " + u
                + " (ClientOptions.withDaemonUids)");
    }

    /** Version 2: WELCOME's uid must be the uid SO_PEERCRED gave. */
    static void checkWelcome(Path socket, PeerCredentials peer, Welcome welcome) {
        if (welcome.version() >= 2 && welcome.uid() != peer.uid()) {
            throw new EngramClientException("refusing the daemon on " + socket + ": its WELCOME says uid "
                    + Integer.toUnsignedString(welcome.uid()) + " but SO_PEERCRED says uid "
                    + Integer.toUnsignedString(peer.uid()) + " (pid " + peer.pid() + ")");
        }
    }
}
