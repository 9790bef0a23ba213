package io.engramhost.client;

import io.engramhost.protocol.ErrorCode;
import java.util.List;

/**
 * The daemon refused or failed a request, or could not be reached. {@link #code()} is null when
 * the failure was local (no socket, refused connection, timeout).
 */
public final class EngramClientException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final transient ErrorCode code;
    private final transient List<String> details;

    public EngramClientException(ErrorCode code, String message, List<String> details) {
        super(message);
        this.code = code;
        this.details = List.copyOf(details);
    }

    public EngramClientException(String message, Throwable cause) {
        super(message, cause);
        this.code = null;
        this.details = List.of();
    }

    public ErrorCode code() {
        return code;
    }

    public List<String> details() {
        return details;
    }
}
