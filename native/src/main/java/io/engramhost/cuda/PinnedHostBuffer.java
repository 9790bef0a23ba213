package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.util.Bytes;
import jnr.ffi.Pointer;

/**
 * Owns one page-locked host allocation made by the driver ({@code cuMemHostAlloc}): the way an inference engine
 * pins its own copy of a table (PyTorch's pinned host allocator calls {@code cudaHostAlloc}, and
 * {@code tensor.pin_memory()}, which vLLM uses, goes through it). {@link #close()} frees it once
 * ({@code cuMemFreeHost}).
 *
 * <p>{@link #allocate(long, int, String)} asks for {@link #FLAG_DEVICEMAP} and {@link #FLAG_PORTABLE}. With unified
 * addressing (every 64-bit process on a GPU of compute capability 2.0 or later) the driver makes such memory
 * portable and mapped whatever the flags say, so this is the same memory as PyTorch's {@code cudaHostAllocDefault}
 * gets. The device pointer is asked of the driver ({@code cuMemHostGetDevicePointer_v2}) rather than assumed;
 * under unified addressing it equals the host address ({@link #unifiedAddress()}).
 */
public final class PinnedHostBuffer extends CudaOwner {
    /** CU_MEMHOSTALLOC_PORTABLE: pinned for every context, not only the allocating one. */
    public static final int FLAG_PORTABLE = 0x1;
    /** CU_MEMHOSTALLOC_DEVICEMAP: mapped into the device's address space. */
    public static final int FLAG_DEVICEMAP = 0x2;
    /** CU_MEMHOSTALLOC_WRITECOMBINED: fast for the GPU to read, very slow for the CPU to read. */
    public static final int FLAG_WRITECOMBINED = 0x4;
    private static final int KNOWN_FLAGS = FLAG_PORTABLE | FLAG_DEVICEMAP | FLAG_WRITECOMBINED;

    private final long hostAddress;
    private final long devicePointer;
    private final long size;
    private final int flags;

    private PinnedHostBuffer(long hostAddress, long devicePointer, long size, int flags, int device, String name) {
        super(device, name);
        this.hostAddress = hostAddress;
        this.devicePointer = devicePointer;
        this.size = size;
        this.flags = flags;
    }

    /** {@code bytes} of pinned host memory, DEVICEMAP|PORTABLE, allocated with {@code device}'s context current. */
    public static PinnedHostBuffer allocate(long bytes, int device, String name) {
        return allocate(bytes, device, FLAG_DEVICEMAP | FLAG_PORTABLE, name);
    }

    /**
     * {@code bytes} of pinned host memory with the given CU_MEMHOSTALLOC flags ({@link #FLAG_PORTABLE},
     * {@link #FLAG_DEVICEMAP}, {@link #FLAG_WRITECOMBINED}; 0 for none), allocated with {@code device}'s context
     * current.
     */
    public static PinnedHostBuffer allocate(long bytes, int device, int flags, String name) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("cuMemHostAlloc(" + name + "): size must be positive, was " + bytes);
        }
        if ((flags & ~KNOWN_FLAGS) != 0) {
            throw new IllegalArgumentException("cuMemHostAlloc(" + name + "): flags 0x" + Integer.toHexString(flags)
                    + " name bits other than PORTABLE 0x1, DEVICEMAP 0x2 and WRITECOMBINED 0x4");
        }
        Cuda.useDevice(device);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemHostAlloc(out, bytes, flags), "cuMemHostAlloc(" + Bytes.format(bytes) + ", "
                + flagNames(flags) + ", GPU " + device + ", " + name + ")");
        long host = out.getLong(0);
        Pointer dev = CuStructs.zeroed(8);
        int r = Cuda.lib().cuMemHostGetDevicePointer_v2(dev, host, 0);
        if (r != CudaErrors.SUCCESS) {
            CudaException e = new CudaException("cuMemHostGetDevicePointer(" + name + ")", r);
            int freed = Cuda.lib().cuMemFreeHost(host);
            if (freed != CudaErrors.SUCCESS) {
                e.addSuppressed(new CudaException("cuMemFreeHost(" + name + ")", freed));
            }
            throw e;
        }
        return new PinnedHostBuffer(host, dev.getLong(0), bytes, flags, device, name);
    }

    /** {@code DEVICEMAP|PORTABLE}, {@code WRITECOMBINED}, or {@code no flags}: the flags as the messages name them. */
    static String flagNames(int flags) {
        StringBuilder s = new StringBuilder();
        for (int bit : new int[] {FLAG_DEVICEMAP, FLAG_PORTABLE, FLAG_WRITECOMBINED}) {
            if ((flags & bit) != 0) {
                s.append(s.length() == 0 ? "" : "|").append(bit == FLAG_DEVICEMAP ? "DEVICEMAP"
                        : bit == FLAG_PORTABLE ? "PORTABLE" : "WRITECOMBINED");
            }
        }
        return s.length() == 0 ? "no flags" : s.toString();
    }

    /** The CPU's address of the first byte. Throws once closed. */
    public long hostAddress() {
        checkOpen("pinned host buffer");
        return hostAddress;
    }

    /** The GPU's address of the first byte. Throws once closed. */
    public long devicePointer() {
        checkOpen("pinned host buffer");
        return devicePointer;
    }

    /** True when the GPU reads the memory at its CPU address (unified addressing). */
    public boolean unifiedAddress() {
        return devicePointer == hostAddress;
    }

    public long size() {
        return size;
    }

    public int flags() {
        return flags;
    }

    @Override
    public String toString() {
        return "PinnedHostBuffer[" + name + ", " + Bytes.format(size) + ", " + flagNames(flags)
                + (isOpen() ? "]" : ", closed]");
    }

    @Override
    protected void release() {
        Cuda.check(Cuda.lib().cuMemFreeHost(hostAddress), "cuMemFreeHost(" + Bytes.format(size) + ", " + name + ")");
    }
}
