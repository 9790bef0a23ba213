package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.util.Bytes;
import jnr.ffi.Pointer;

/** Owns one cuMemAlloc'd device buffer; close frees it once. Copies are synchronous. */
public final class DeviceBuffer extends CudaOwner {
    private final long pointer;
    private final long size;

    private DeviceBuffer(long pointer, long size, int device, String name) {
        super(device, name);
        this.pointer = pointer;
        this.size = size;
    }

    public static DeviceBuffer allocate(long bytes, int device, String name) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("cuMemAlloc(" + name + "): size must be positive, was " + bytes);
        }
        Cuda.useDevice(device);
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemAlloc_v2(out, bytes), "cuMemAlloc(" + Bytes.format(bytes) + " on GPU " + device + ", " + name + ")");
        return new DeviceBuffer(out.getLong(0), bytes, device, name);
    }

    /** The device address. Throws once closed. */
    public long pointer() {
        checkOpen("device buffer");
        return pointer;
    }

    public long size() {
        return size;
    }

    public int device() {
        return device;
    }

    /** Copies {@code length} bytes from host memory at {@code hostAddress} to {@code offset}. */
    public void copyFromHost(long hostAddress, long offset, long length) {
        checkRange(offset, length);
        Cuda.copyHostToDevice(device, pointer() + offset, hostAddress, length);
    }

    /** Copies {@code length} bytes at {@code offset} to host memory at {@code hostAddress}. */
    public void copyToHost(long offset, long hostAddress, long length) {
        checkRange(offset, length);
        Cuda.copyDeviceToHost(device, hostAddress, pointer() + offset, length);
    }

    /** Sets every byte to {@code value}. */
    public void fill(byte value) {
        Cuda.memset(device, pointer(), value, size);
    }

    private void checkRange(long offset, long length) {
        if (offset < 0 || length < 0 || offset + length > size) {
            throw new IndexOutOfBoundsException("device buffer " + name + ": [" + offset + ", " + (offset + length)
                    + ") is outside its " + size + " bytes");
        }
    }

    @Override
    protected void release() {
        Cuda.check(Cuda.lib().cuMemFree_v2(pointer), "cuMemFree(" + name + ")");
    }
}
