package io.engramhost.cuda;

/**
 * A CUDA driver call failed. The message names the call with its context and the CUresult by
 * name and number, e.g. {@code cuMemCreate(16.0 GiB, HOST_NUMA node 0) failed:
 * CUDA_ERROR_OUT_OF_MEMORY (2)}.
 */
public class CudaException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String call;
    private final int result;

    public CudaException(String call, int result) {
        this(call, result, null);
    }

    public CudaException(String call, int result, String hint) {
        super(call + " failed: " + CudaErrors.describe(result) + (hint == null ? "" : "; " + hint));
        this.call = call;
        this.result = result;
    }

    /** The call with its context, e.g. {@code cuMemMap(2.0 GiB at +0)}. */
    public String call() {
        return call;
    }

    /** The CUresult number. */
    public int result() {
        return result;
    }

    public String resultName() {
        return CudaErrors.name(result);
    }
}
