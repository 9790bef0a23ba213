package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.os.Fd;
import io.engramhost.util.Bytes;
import jnr.ffi.Pointer;

/**
 * Owns one CUDA physical allocation handle (cuMemCreate, or cuMemImportFromShareableHandle).
 * {@link #close()} releases it once; the memory itself lives on while another handle or a
 * mapping of it exists, in this process or another.
 */
public final class MemHandle extends CudaOwner {
    /** CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR. */
    public static final int HANDLE_TYPE_POSIX_FD = 1;
    private static final int GRANULARITY_MINIMUM = 0;
    private static final int GRANULARITY_RECOMMENDED = 1;

    private final long handle;
    private final long size;
    private final Location location;

    private MemHandle(long handle, long size, Location location, int device, String name) {
        super(device, name);
        this.handle = handle;
        this.size = size;
        this.location = location;
    }

    /**
     * The allocation granularity for memory at {@code location} (exportable as a POSIX fd when
     * {@code posixFd}): the minimum, or the recommended one. Sizes must be multiples of it.
     */
    public static long granularity(Location location, boolean posixFd, int device, boolean recommended) {
        Cuda.useDevice(device);
        Pointer prop = CuStructs.allocationProp(location.type(), location.id(), posixFd ? HANDLE_TYPE_POSIX_FD : 0);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemGetAllocationGranularity(out, prop,
                recommended ? GRANULARITY_RECOMMENDED : GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity(" + location + ")");
        return out.getLong(0);
    }

    /**
     * cuMemCreate of {@code size} bytes (a multiple of the minimum granularity) at {@code location};
     * {@code device} is the GPU whose context makes the call.
     */
    public static MemHandle create(long size, Location location, boolean posixFd, int device, String name) {
        long g = granularity(location, posixFd, device, false);
        if (size <= 0 || size % g != 0) {
            throw new IllegalArgumentException("cuMemCreate(" + name + "): size " + size + " is not a positive multiple of the "
                    + Bytes.format(g) + " granularity of " + location);
        }
        Pointer prop = CuStructs.allocationProp(location.type(), location.id(), posixFd ? HANDLE_TYPE_POSIX_FD : 0);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemCreate(out, size, prop, 0L),
                "cuMemCreate(" + Bytes.format(size) + ", " + location + ", " + name + ")");
        return new MemHandle(out.getLong(0), size, location, device, name);
    }

    /**
     * Imports an allocation exported as a POSIX fd (by this or another process). The caller keeps
     * {@code fd} and may close it right after. {@code size} is the allocation's size, as the
     * exporter reported it.
     */
    public static MemHandle importFd(Fd fd, long size, int device, String name) {
        Cuda.useDevice(device);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemImportFromShareableHandle(out, fd.get(), HANDLE_TYPE_POSIX_FD),
                "cuMemImportFromShareableHandle(" + name + ", fd=" + fd.get() + ")");
        long h = out.getLong(0);
        Pointer prop = CuStructs.zeroed(CuStructs.ALLOCATION_PROP_SIZE);
        int r = Cuda.lib().cuMemGetAllocationPropertiesFromHandle(prop, h);
        if (r != CudaErrors.SUCCESS) {
            Cuda.lib().cuMemRelease(h);
            throw new CudaException("cuMemGetAllocationPropertiesFromHandle(" + name + ")", r);
        }
        Location loc = new Location(prop.getInt(CuStructs.PROP_LOCATION_OFFSET),
                prop.getInt(CuStructs.PROP_LOCATION_OFFSET + 4));
        return new MemHandle(h, size, loc, device, name);
    }

    /** A fresh POSIX fd for this allocation (CLOEXEC), owned by the caller; each call exports anew. */
    public Fd exportFd() {
        Cuda.useDevice(device);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemExportToShareableHandle(out, raw(), HANDLE_TYPE_POSIX_FD, 0L),
                "cuMemExportToShareableHandle(" + name + ", POSIX fd)");
        return Fd.adopt(out.getInt(0), "CUDA allocation " + name);
    }

    /** The raw CUmemGenericAllocationHandle. Throws once closed. */
    public long raw() {
        checkOpen("allocation handle of");
        return handle;
    }

    public long size() {
        return size;
    }

    /** Where the memory lives: a GPU or a host NUMA node. */
    public Location location() {
        return location;
    }

    public int device() {
        return device;
    }

    public String name() {
        return name;
    }

    @Override
    protected void release() {
        Cuda.check(Cuda.lib().cuMemRelease(handle), "cuMemRelease(" + name + ")");
    }

    @Override
    public String toString() {
        return "MemHandle[" + name + ", " + Bytes.format(size) + " at " + location + (isOpen() ? "" : ", closed") + "]";
    }
}
