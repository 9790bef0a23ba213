package io.engramhost.cuda;

/** CUDA cannot be used on this machine; the message says why (no driver, no device, ...). */
public class CudaUnavailableException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    public CudaUnavailableException(String cause) {
        super("CUDA is not available: " + cause);
    }
}
