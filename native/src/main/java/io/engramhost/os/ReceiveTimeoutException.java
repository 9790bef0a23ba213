package io.engramhost.os;

/** Nothing (or not all of a message) arrived from the peer within the timeout. */
public final class ReceiveTimeoutException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ReceiveTimeoutException(String message) {
        super(message);
    }
}
