package io.engramhost.daemon.loop;

import io.engramhost.protocol.ErrorReply;
import java.util.List;

/**
 * What a request is answered with: the bytes (and fds) to write (null: none), what the connection becomes once they
 * are written, the protocol version it speaks from then on, and what to run once the answer is written (null:
 * nothing).
 */
record Answer(Outbound out, Next next, int version, Runnable onWritten) {
    /** What the connection becomes once the answer is written. */
    enum Next { SESSION, LEASE, CLOSE, DETACH }

    static Answer of(Outbound out, Next next, int version) {
        return new Answer(out, next, version, null);
    }

    /** An ERROR in {@code version}, its slices shared (a mismatch's fingerprint is the catalog's array, not a copy). */
    static Answer error(ErrorReply e, Next next, int version) {
        return of(Outbound.frame(e.encodeSlices(version), version, List.of()), next, version);
    }
}
