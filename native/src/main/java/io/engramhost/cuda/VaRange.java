package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.util.Bytes;
import jnr.ffi.Pointer;

/** Owns one reserved virtual address range (cuMemAddressReserve); close frees it once. */
public final class VaRange extends CudaOwner {
    private final long base;
    private final long size;

    private VaRange(long base, long size, int device, String name) {
        super(device, name);
        this.base = base;
        this.size = size;
    }

    /** Reserves {@code size} bytes aligned to {@code alignment} (0: the driver's default). */
    public static VaRange reserve(long size, long alignment, int device, String name) {
        if (size <= 0) {
            throw new IllegalArgumentException("cuMemAddressReserve(" + name + "): size must be positive, was " + size);
        }
        Cuda.useDevice(device);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemAddressReserve(out, size, alignment, 0L, 0L),
                "cuMemAddressReserve(" + Bytes.format(size) + ", " + name + ")");
        return new VaRange(out.getLong(0), size, device, name);
    }

    /** The first address. Throws once closed. */
    public long base() {
        checkOpen("VA range of");
        return base;
    }

    public long size() {
        return size;
    }

    @Override
    protected void release() {
        Cuda.check(Cuda.lib().cuMemAddressFree(base, size), "cuMemAddressFree(" + name + ")");
    }
}
