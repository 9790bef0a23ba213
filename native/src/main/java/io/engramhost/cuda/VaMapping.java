package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.util.Bytes;

/**
 * Owns one cuMemMap of a whole allocation handle at an address inside a {@link VaRange}; close
 * unmaps it once. Access is granted per location with {@link #setAccess(Location, boolean)}.
 */
public final class VaMapping extends CudaOwner {
    /** CU_MEM_ACCESS_FLAGS_PROT_READ and PROT_READWRITE. */
    public static final int PROT_READ = 1;
    public static final int PROT_READWRITE = 3;

    private final long address;
    private final long size;

    private VaMapping(long address, long size, int device, String name) {
        super(device, name);
        this.address = address;
        this.size = size;
    }

    /** Maps all of {@code handle} at {@code range.base() + offset}. */
    public static VaMapping map(VaRange range, long offset, MemHandle handle) {
        if (offset < 0 || offset + handle.size() > range.size()) {
            throw new IllegalArgumentException("cuMemMap(" + handle.name() + "): " + Bytes.format(handle.size()) + " at +"
                    + offset + " does not fit the reserved " + Bytes.format(range.size()));
        }
        Cuda.useDevice(handle.device());
        long at = range.base() + offset;
        Cuda.check(Cuda.lib().cuMemMap(at, handle.size(), 0L, handle.raw(), 0L),
                "cuMemMap(" + handle.name() + ", " + Bytes.format(handle.size()) + " at +" + offset + ")");
        return new VaMapping(at, handle.size(), handle.device(), handle.name());
    }

    /**
     * cuMemSetAccess for one location: a GPU ({@link Location#device}) or the CPU (a HOST_NUMA
     * location, only for host allocations; it costs about three times the GPU's).
     */
    public void setAccess(Location who, boolean write) {
        Cuda.useDevice(device);
        int flags = write ? PROT_READWRITE : PROT_READ;
        Cuda.check(Cuda.lib().cuMemSetAccess(address(), size,
                CuStructs.accessDescs(new int[] {who.type()}, new int[] {who.id()}, new int[] {flags}), 1L),
                "cuMemSetAccess(" + name + ", " + Bytes.format(size) + ", " + who + ", " + (write ? "READWRITE" : "READ") + ")");
    }

    /** The mapped address (valid where access was set). Throws once closed. */
    public long address() {
        checkOpen("mapping of");
        return address;
    }

    public long size() {
        return size;
    }

    @Override
    protected void release() {
        Cuda.check(Cuda.lib().cuMemUnmap(address, size), "cuMemUnmap(" + name + ", " + Bytes.format(size) + ")");
    }
}
