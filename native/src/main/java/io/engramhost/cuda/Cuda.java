package io.engramhost.cuda;

import com.kenai.jffi.Library;
import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.cuda.internal.CudaLaunch;
import io.engramhost.cuda.internal.LibCuda;
import io.engramhost.util.Bytes;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import jnr.ffi.LibraryLoader;
import jnr.ffi.Pointer;

/**
 * The CUDA driver, loaded lazily from {@code libcuda.so.1} on first use. On a machine without a
 * driver or GPU, {@link #available()} is false and {@link #unavailabilityCause()} says why;
 * nothing fails at class initialisation. Every other call first {@link #ensureAvailable()}s.
 *
 * <p>Each device's primary context is retained once, kept for the life of the process, and made
 * current by {@link #useDevice(int)} in whichever thread calls.
 */
public final class Cuda {
    public static final String LIBRARY = "libcuda.so.1";

    private static volatile LibCuda loaded;
    private static final Map<Integer, Long> PRIMARY_CONTEXTS = new ConcurrentHashMap<>();
    private static final Map<Integer, CudaDevice> DEVICES = new ConcurrentHashMap<>();

    private Cuda() {
    }

    /** Probed once, on first use of {@link Cuda}'s driver-backed calls. */
    private static final class Probe {
        static final LibCuda LIB;
        static final CudaLaunch LAUNCH;
        static final String CAUSE;
        static final int DRIVER_VERSION;
        static final int DEVICE_COUNT;

        static {
            LibCuda lib = null;
            CudaLaunch launch = null;
            String cause = null;
            int version = 0;
            int count = 0;
            try {
                if (Library.getCachedInstance(LIBRARY,
                        Library.LAZY | Library.LOCAL) == null) {
                    cause = LIBRARY + " not found: no NVIDIA driver on this machine ("
                            + Library.getLastError() + ")";
                } else {
                    lib = LibraryLoader.create(LibCuda.class).failImmediately().load(LIBRARY);
                    loaded = lib;
                    launch = CudaLaunch.bind(LIBRARY);
                    int r = lib.cuInit(0);
                    if (r != CudaErrors.SUCCESS) {
                        cause = LIBRARY + ": cuInit: " + CudaErrors.describe(r)
                                + (r == CudaErrors.STUB_LIBRARY ? " (the loader found the toolkit's stub, not the driver)" : "");
                    } else {
                        Pointer out = CuStructs.zeroed(4);
                        check(lib.cuDriverGetVersion(out), "cuDriverGetVersion");
                        version = out.getInt(0);
                        check(lib.cuDeviceGetCount(out), "cuDeviceGetCount");
                        count = out.getInt(0);
                        if (count == 0) {
                            cause = LIBRARY + ": cuDeviceGetCount: no CUDA device on this machine";
                        }
                    }
                }
            } catch (UnsatisfiedLinkError e) {
                cause = LIBRARY + " lacks a call engram-host needs (driver older than CUDA 12.1?): " + firstLine(e);
            } catch (Throwable e) {
                cause = "loading " + LIBRARY + " failed: " + e;
            }
            LIB = cause == null ? lib : null;
            LAUNCH = cause == null ? launch : null;
            CAUSE = cause;
            DRIVER_VERSION = version;
            DEVICE_COUNT = count;
        }

        private static String firstLine(Throwable t) {
            String m = String.valueOf(t.getMessage());
            int nl = m.indexOf('\n');
            return nl < 0 ? m : m.substring(0, nl);
        }
    }

    /** True when the driver loaded, cuInit succeeded and there is at least one device. */
    public static boolean available() {
        return Probe.CAUSE == null;
    }

    /**
     * Why CUDA is not available, naming the driver library, e.g. {@code libcuda.so.1: cuInit:
     * CUDA_ERROR_NO_DEVICE (100)}; null when it is.
     */
    public static String unavailabilityCause() {
        return Probe.CAUSE;
    }

    /** @throws CudaUnavailableException naming the cause when CUDA cannot be used here */
    public static void ensureAvailable() {
        if (Probe.CAUSE != null) {
            throw new CudaUnavailableException(Probe.CAUSE);
        }
    }

    static LibCuda lib() {
        ensureAvailable();
        return Probe.LIB;
    }

    /** cuLaunchKernel, bound apart from {@link #lib()} (it has eleven arguments: CudaLaunch says why). */
    static CudaLaunch launcher() {
        ensureAvailable();
        return Probe.LAUNCH;
    }

    /** The driver's CUDA version, e.g. 13000 for 13.0. */
    public static int driverVersion() {
        ensureAvailable();
        return Probe.DRIVER_VERSION;
    }

    public static int deviceCount() {
        ensureAvailable();
        return Probe.DEVICE_COUNT;
    }

    /** Throws a {@link CudaException} naming {@code call} unless {@code result} is CUDA_SUCCESS. */
    public static void check(int result, String call) {
        if (result != CudaErrors.SUCCESS) {
            throw new CudaException(call, result);
        }
    }

    /** The driver's name for a CUresult, or null when the driver is not loaded or does not know it. */
    static String errorNameFromDriver(int result) {
        LibCuda lib = loaded;
        if (lib == null) {
            return null;
        }
        Pointer out = CuStructs.zeroed(8);
        if (lib.cuGetErrorName(result, out) != CudaErrors.SUCCESS) {
            return null;
        }
        Pointer s = out.getPointer(0);
        return s == null ? null : s.getString(0);
    }

    static void checkOrdinal(int ordinal) {
        int count = deviceCount();
        if (ordinal < 0 || ordinal >= count) {
            throw new IllegalArgumentException("GPU " + ordinal + " does not exist: this machine has " + count
                    + " CUDA device(s), ordinals 0.." + (count - 1));
        }
    }

    /**
     * Makes {@code ordinal}'s primary context current in the calling thread, retaining it first if
     * this process has not yet.
     */
    public static void useDevice(int ordinal) {
        checkOrdinal(ordinal);
        LibCuda lib = lib();
        long ctx = PRIMARY_CONTEXTS.computeIfAbsent(ordinal, o -> {
            Pointer out = CuStructs.zeroed(8);
            check(lib.cuDevicePrimaryCtxRetain(out, o), "cuDevicePrimaryCtxRetain(GPU " + o + ")");
            return out.getLong(0);
        });
        check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent(GPU " + ordinal + " primary context)");
    }

    /** Waits for all work on {@code ordinal} (its primary context) to finish. */
    public static void synchronize(int ordinal) {
        useDevice(ordinal);
        check(lib().cuCtxSynchronize(), "cuCtxSynchronize(GPU " + ordinal + ")");
    }

    /** Free and total device memory of {@code ordinal}, in bytes. */
    public static long[] memInfo(int ordinal) {
        useDevice(ordinal);
        Pointer free = CuStructs.zeroed(8);
        Pointer total = CuStructs.zeroed(8);
        check(lib().cuMemGetInfo_v2(free, total), "cuMemGetInfo(GPU " + ordinal + ")");
        return new long[] {free.getLong(0), total.getLong(0)};
    }

    /** The device's identity and capabilities, queried once. */
    public static CudaDevice device(int ordinal) {
        checkOrdinal(ordinal);
        return DEVICES.computeIfAbsent(ordinal, o -> DeviceQuery.query(lib(), o));
    }

    /** Synchronous copy of {@code bytes} from host memory to a device address. */
    public static void copyHostToDevice(int ordinal, long dst, long srcHost, long bytes) {
        useDevice(ordinal);
        check(lib().cuMemcpyHtoD_v2(dst, srcHost, bytes), "cuMemcpyHtoD(" + Bytes.format(bytes) + " on GPU " + ordinal + ")");
    }

    /** Synchronous copy of {@code bytes} from a device address to host memory. */
    public static void copyDeviceToHost(int ordinal, long dstHost, long src, long bytes) {
        useDevice(ordinal);
        check(lib().cuMemcpyDtoH_v2(dstHost, src, bytes), "cuMemcpyDtoH(" + Bytes.format(bytes) + " on GPU " + ordinal + ")");
    }

    /** Sets {@code bytes} bytes at a device address to {@code value}. */
    public static void memset(int ordinal, long dst, byte value, long bytes) {
        useDevice(ordinal);
        check(lib().cuMemsetD8_v2(dst, value, bytes), "cuMemsetD8(" + Bytes.format(bytes) + " on GPU " + ordinal + ")");
        check(lib().cuCtxSynchronize(), "cuCtxSynchronize(after cuMemsetD8 on GPU " + ordinal + ")");
    }
}
