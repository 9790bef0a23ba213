package io.engramhost.daemon.loop;

import io.engramhost.os.Fd;
import io.engramhost.os.PeerCredentials;
import io.engramhost.protocol.ConnectionPhase;
import java.time.Instant;

/**
 * A connection as a takeover moves it from one daemon to the next, at rest: its socket, where it was in the
 * conversation, the version it chose, its peer, and its lease (id 0 and no time: not a lease). The predecessor's
 * loop lists these when it freezes (still owning each socket); the successor's loop takes them over.
 */
public record HandedConnection(Fd fd, ConnectionPhase phase, int version, PeerCredentials peer, long leaseId,
        Instant leaseSince) {
}
