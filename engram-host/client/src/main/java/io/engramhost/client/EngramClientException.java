package io.engramhost.client;

import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.cuda.CudaException;
import io.engramhost.cuda.CudaUnavailableException;
import io.engramhost.os.NativeException;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ProtocolException;
import java.io.UncheckedIOException;
import java.util.List;

/**
 * Every failure the client's API throws at run time is one of these, so that an engine catches one type: the
 * daemon refused or failed a request, broke the protocol, or could not be trusted or reached
 * ({@link DaemonAbsentException}: no daemon listens); a fingerprint or content mismatch
 * ({@link FingerprintMismatchException}, {@link ContentMismatchException}); or a failure below the client (the
 * CUDA driver missing or failing, a system call, a checkpoint on disk), whose original is the cause. Only a wrong
 * argument (IllegalArgumentException, NullPointerException) or a closed handle used (IllegalStateException) is not.
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

    /** What a client without CUDA can do instead: the CPU views, which need no driver. */
    static final String NO_GPU_VIEW = "for CPU views only, connect without a GPU view (no ClientOptions.withGpu;"
            + " engram-host import without --gpu)";

    /**
     * {@code e} as the client's API throws it: a failure below the client (CUDA, a system call, a checkpoint, a
     * frame; no CUDA at all gets {@link #NO_GPU_VIEW} after its cause) becomes an EngramClientException with the same
     * message and {@code e} as its cause; anything else (an EngramClientException, a wrong argument) is returned as it
     * is.
     */
    static RuntimeException of(RuntimeException e) {
        if (e instanceof CudaUnavailableException) { // a GPU view asked for where there is none: say the way out
            return new EngramClientException(e.getMessage() + "; " + NO_GPU_VIEW, e);
        }
        if (e instanceof CudaException || e instanceof NativeException
                || e instanceof CheckpointException || e instanceof ProtocolException
                || e instanceof UncheckedIOException) {
            return new EngramClientException(e.getMessage(), e);
        }
        return e;
    }
}
