package io.engramhost.cuda.internal;

import com.kenai.jffi.CallContext;
import com.kenai.jffi.CallContextCache;
import com.kenai.jffi.CallingConvention;
import com.kenai.jffi.HeapInvocationBuffer;
import com.kenai.jffi.Invoker;
import com.kenai.jffi.Library;
import com.kenai.jffi.Type;

/**
 * libcuda's {@code cuLaunchKernel}, the driver call of more than five arguments (eleven), called through jffi's own
 * invoker rather than {@link LibCuda}: jnr-ffi's x86-64 stub compiler passes a garbage sixth argument (jnr-ffi
 * issue 181), and a library cannot make sure {@code -Djnr.ffi.x86asm.enabled=false} is set before jnr-ffi is first
 * used. See {@code io.engramhost.os.internal.WideCalls} for libc's.
 */
public final class CudaLaunch {
    private static final CallContext CALL = CallContextCache.getInstance().getCallContext(Type.SINT,
            new Type[] {Type.POINTER, Type.UINT, Type.UINT, Type.UINT, Type.UINT, Type.UINT, Type.UINT, Type.UINT,
                Type.POINTER, Type.POINTER, Type.POINTER},
            CallingConvention.DEFAULT, false);
    private final long address;

    private CudaLaunch(long address) {
        this.address = address;
    }

    /** Binds {@code cuLaunchKernel} of {@code library} (already loaded by LibCuda's loader). */
    public static CudaLaunch bind(String library) {
        Library lib = Library.getCachedInstance(library, Library.LAZY | Library.LOCAL);
        long address = lib == null ? 0 : lib.getSymbolAddress("cuLaunchKernel");
        if (address == 0) {
            throw new UnsatisfiedLinkError(library + ": cuLaunchKernel not found: " + Library.getLastError());
        }
        return new CudaLaunch(address);
    }

    /** {@code cuLaunchKernel}: the CUresult. */
    public int launch(long function, int gridX, int gridY, int gridZ, int blockX, int blockY, int blockZ,
            int sharedMemBytes, long stream, long kernelParams, long extra) {
        HeapInvocationBuffer args = new HeapInvocationBuffer(CALL);
        args.putAddress(function);
        args.putInt(gridX);
        args.putInt(gridY);
        args.putInt(gridZ);
        args.putInt(blockX);
        args.putInt(blockY);
        args.putInt(blockZ);
        args.putInt(sharedMemBytes);
        args.putAddress(stream);
        args.putAddress(kernelParams);
        args.putAddress(extra);
        return Invoker.getInstance().invokeInt(CALL, address, args);
    }
}
