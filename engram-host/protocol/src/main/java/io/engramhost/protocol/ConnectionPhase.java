package io.engramhost.protocol;

/**
 * Where a connection is in its conversation with the daemon (docs/protocol.md, "Connection states"), with the
 * stable code a handover carries for it (HANDOVER_COMMIT's {@code phase}). The codes are part of the handover's
 * wire format: a successor of any build reads a predecessor's, so they never change.
 */
public enum ConnectionPhase {
    /** Connected; the next message must be HELLO. */
    HELLO(0),
    /** HELLO answered: requests (IMPORT, STATUS, STOP, BYE, TAKEOVER) one at a time. */
    SESSION(1),
    /** An IMPORT was answered with a MANIFEST: the connection is the lease, and only BYE (or EOF) may follow. */
    LEASE(2);

    private final int code;

    ConnectionPhase(int code) {
        this.code = code;
    }

    /** The phase's wire code. */
    public int code() {
        return code;
    }

    /** The phase of wire code {@code code}. */
    public static ConnectionPhase of(int code) {
        for (ConnectionPhase p : values()) {
            if (p.code == code) {
                return p;
            }
        }
        throw new ProtocolException("connection phase " + code + " is not one of 0 (HELLO), 1 (SESSION), 2 (LEASE)");
    }

    /** The protocol version a message in this phase is encoded in: HELLO always in 1, then the chosen one. */
    public int frameVersion(int chosen) {
        return this == HELLO ? 1 : chosen;
    }
}
