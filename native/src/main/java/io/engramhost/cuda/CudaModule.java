package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import java.lang.ref.Reference;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import jnr.ffi.Pointer;

/**
 * Owns one loaded module (cuModuleLoadData of PTX text or a fatbin) and launches its kernels on the
 * default stream. {@link #close()} unloads it once.
 */
public final class CudaModule extends CudaOwner {
    private final long module;
    private final Map<String, Long> functions = new ConcurrentHashMap<>();

    private CudaModule(long module, int device, String name) {
        super(device, name);
        this.module = module;
    }

    /** Loads {@code image} (PTX text, NUL added here, or a cubin/fatbin) into {@code device}'s context. */
    public static CudaModule load(byte[] image, int device, String name) {
        Cuda.useDevice(device);
        Pointer img = CuStructs.zeroed(image.length + 1);
        img.put(0, image, 0, image.length);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuModuleLoadData(out, img), "cuModuleLoadData(" + name + ", " + image.length + " bytes, GPU " + device + ")");
        return new CudaModule(out.getLong(0), device, name);
    }

    /** The CUfunction of kernel {@code kernel} (looked up once). */
    public long function(String kernel) {
        checkOpen("module");
        return functions.computeIfAbsent(kernel, k -> {
            Cuda.useDevice(device);
            Pointer out = CuStructs.zeroed(8);
            Cuda.check(Cuda.lib().cuModuleGetFunction(out, module, k), "cuModuleGetFunction(" + name + ", " + k + ")");
            return out.getLong(0);
        });
    }

    /** Launches {@code kernel} on a 1-D grid on the default stream; does not wait for it. */
    public void launch(String kernel, int gridX, int blockX, int sharedBytes, KernelArgs args) {
        long f = function(kernel);
        Cuda.useDevice(device);
        Pointer[] params = args.toParams();
        int r = Cuda.launcher().launch(f, gridX, 1, 1, blockX, 1, 1, sharedBytes, 0L, params[0].address(), 0L);
        Reference.reachabilityFence(params);
        Cuda.check(r, "cuLaunchKernel(" + kernel + ", grid " + gridX + ", block " + blockX + ")");
    }

    public int device() {
        return device;
    }

    @Override
    protected void release() {
        Cuda.check(Cuda.lib().cuModuleUnload(module), "cuModuleUnload(" + name + ")");
    }
}
