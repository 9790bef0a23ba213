package io.engramhost.os;

/** The peer closed the connection (EOF, EPIPE or ECONNRESET). */
public final class PeerClosedException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public PeerClosedException(String message) {
        super(message);
    }
}
