package io.engramhost.protocol;

/** Error codes carried by an ERROR frame, with their stable wire codes. */
public enum ErrorCode {
    /** The request was malformed or not valid in this state. */
    BAD_REQUEST(1, false),
    /** No protocol version in common. */
    UNSUPPORTED_VERSION(2, false),
    /** The daemon is still loading; try again later. */
    NOT_READY(3, true),
    /** The client's expected fingerprint differs from the daemon's. */
    FINGERPRINT_MISMATCH(4, false),
    /** The peer's uid is not admitted. */
    NOT_ALLOWED(5, false),
    /** The daemon is stopping. */
    STOPPING(6, false),
    /** The daemon failed; the message says how. */
    INTERNAL(7, false),
    /** The daemon's load failed; it serves nothing. */
    LOAD_FAILED(8, false),
    /** A connection limit is reached, or this connection was evicted; retry after a pause. */
    BUSY(9, true),
    /** The connection missed a deadline (HELLO, request, idle). */
    TIMED_OUT(10, false);

    private final int code;
    private final boolean retryable;

    ErrorCode(int code, boolean retryable) {
        this.code = code;
        this.retryable = retryable;
    }

    public int code() {
        return code;
    }

    public boolean retryable() {
        return retryable;
    }

    /** The code's constant, or null for a code this version does not know (a client shows its message). */
    public static ErrorCode of(int code) {
        for (ErrorCode c : values()) {
            if (c.code == code) {
                return c;
            }
        }
        return null;
    }
}
