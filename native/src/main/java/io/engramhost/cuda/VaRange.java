package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import java.util.concurrent.atomic.AtomicBoolean;
import jnr.ffi.Pointer;

/** Owns one reserved virtual address range (cuMemAddressReserve); close frees it once. */
public final class VaRange implements AutoCloseable {
    private final long base;
    private final long size;
    private final int device;
    private final String name;
    private final AtomicBoolean closed = new AtomicBoolean();

    private VaRange(long base, long size, int device, String name) {
        this.base = base;
        this.size = size;
        this.device = device;
        this.name = name;
        CudaResources.opened();
    }

    /** Reserves {@code size} bytes aligned to {@code alignment} (0: the driver's default). */
    public static VaRange reserve(long size, long alignment, int device, String name) {
        if (size <= 0) {
            throw new IllegalArgumentException("cuMemAddressReserve(" + name + "): size must be positive, was " + size);
        }
        Cuda.useDevice(device);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemAddressReserve(out, size, alignment, 0L, 0L),
                "cuMemAddressReserve(" + Sizes.format(size) + ", " + name + ")");
        return new VaRange(out.getLong(0), size, device, name);
    }

    /** The first address. Throws once closed. */
    public long base() {
        if (closed.get()) {
            throw new IllegalStateException("VA range of " + name + " is closed");
        }
        return base;
    }

    public long size() {
        return size;
    }

    public boolean isOpen() {
        return !closed.get();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            CudaResources.closed();
            Cuda.useDevice(device);
            Cuda.check(Cuda.lib().cuMemAddressFree(base, size), "cuMemAddressFree(" + name + ")");
        }
    }
}
