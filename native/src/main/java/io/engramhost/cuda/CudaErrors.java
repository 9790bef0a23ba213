package io.engramhost.cuda;

import java.util.Map;

/**
 * Names of CUresult codes: from {@code cuGetErrorName} when the driver is loaded, else from the
 * codes engram-host expects to see.
 */
public final class CudaErrors {
    public static final int SUCCESS = 0;
    public static final int INVALID_VALUE = 1;
    public static final int OUT_OF_MEMORY = 2;
    public static final int NOT_INITIALIZED = 3;
    public static final int STUB_LIBRARY = 34;
    public static final int NO_DEVICE = 100;
    public static final int INVALID_DEVICE = 101;
    public static final int INVALID_CONTEXT = 201;
    public static final int OPERATING_SYSTEM = 304;
    public static final int INVALID_HANDLE = 400;
    public static final int NOT_FOUND = 500;
    public static final int HOST_MEMORY_ALREADY_REGISTERED = 712;
    public static final int HOST_MEMORY_NOT_REGISTERED = 713;
    public static final int NOT_PERMITTED = 800;
    public static final int NOT_SUPPORTED = 801;

    private static final Map<Integer, String> KNOWN = Map.ofEntries(
            Map.entry(0, "CUDA_SUCCESS"),
            Map.entry(1, "CUDA_ERROR_INVALID_VALUE"),
            Map.entry(2, "CUDA_ERROR_OUT_OF_MEMORY"),
            Map.entry(3, "CUDA_ERROR_NOT_INITIALIZED"),
            Map.entry(4, "CUDA_ERROR_DEINITIALIZED"),
            Map.entry(34, "CUDA_ERROR_STUB_LIBRARY"),
            Map.entry(35, "CUDA_ERROR_INSUFFICIENT_DRIVER"),
            Map.entry(36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
            Map.entry(46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
            Map.entry(100, "CUDA_ERROR_NO_DEVICE"),
            Map.entry(101, "CUDA_ERROR_INVALID_DEVICE"),
            Map.entry(200, "CUDA_ERROR_INVALID_IMAGE"),
            Map.entry(201, "CUDA_ERROR_INVALID_CONTEXT"),
            Map.entry(209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
            Map.entry(218, "CUDA_ERROR_INVALID_PTX"),
            Map.entry(222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
            Map.entry(304, "CUDA_ERROR_OPERATING_SYSTEM"),
            Map.entry(400, "CUDA_ERROR_INVALID_HANDLE"),
            Map.entry(500, "CUDA_ERROR_NOT_FOUND"),
            Map.entry(700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
            Map.entry(712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
            Map.entry(713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
            Map.entry(719, "CUDA_ERROR_LAUNCH_FAILED"),
            Map.entry(800, "CUDA_ERROR_NOT_PERMITTED"),
            Map.entry(801, "CUDA_ERROR_NOT_SUPPORTED"),
            Map.entry(999, "CUDA_ERROR_UNKNOWN"));

    private CudaErrors() {
    }

    /** {@code CUDA_ERROR_OUT_OF_MEMORY}, or {@code CUresult 1234} when nobody knows the code. */
    public static String name(int result) {
        String fromDriver = Cuda.errorNameFromDriver(result);
        if (fromDriver != null) {
            return fromDriver;
        }
        String known = KNOWN.get(result);
        return known != null ? known : "CUresult " + result;
    }

    /** {@code CUDA_ERROR_OUT_OF_MEMORY (2)}. */
    public static String describe(int result) {
        return name(result) + " (" + result + ")";
    }
}
