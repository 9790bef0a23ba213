package io.engramhost.protocol;

/** A frame broke the protocol: wrong magic, unknown type, truncated or oversized field. */
public class ProtocolException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ProtocolException(String message) {
        super(message);
    }
}
