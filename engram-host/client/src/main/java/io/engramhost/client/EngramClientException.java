package io.engramhost.client;

import io.engramhost.protocol.ErrorCode;
import java.util.List;

/**
 * The daemon refused or failed a request, broke the protocol, or could not be trusted or reached.
 * {@link #code()} is the daemon's ERROR code, or null when the failure was local (refused daemon uid
 * or seals, a timeout, a malformed frame) or the code is one this client does not know;
 * {@link #wireCode()} keeps the number of any ERROR (0 when the daemon sent none).
 */
public class EngramClientException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final transient ErrorCode code;
    private final int wireCode;
    private final transient List<String> details;

    public EngramClientException(ErrorCode code, String message, List<String> details) {
        this(code, code == null ? 0 : code.code(), message, details);
    }

    public EngramClientException(ErrorCode code, int wireCode, String message, List<String> details) {
        super(message);
        this.code = code;
        this.wireCode = wireCode;
        this.details = List.copyOf(details);
    }

    public EngramClientException(String message, Throwable cause) {
        super(message, cause);
        this.code = null;
        this.wireCode = 0;
        this.details = List.of();
    }

    public EngramClientException(String message) {
        this(null, 0, message, List.of());
    }

    public ErrorCode code() {
        return code;
    }

    /** The ERROR's code as sent, known or not; 0 when the failure was no ERROR from the daemon. */
    public int wireCode() {
        return wireCode;
    }

    public List<String> details() {
        return details;
    }
}
