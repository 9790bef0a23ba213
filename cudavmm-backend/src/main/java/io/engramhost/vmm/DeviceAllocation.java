package io.engramhost.vmm;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.Location;
import io.engramhost.os.Fd;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Daemon side: a table (or a resident weight) in GPU memory as a CUDA VMM allocation exportable
 * as a POSIX fd, mapped read-write for its GPU and filled with {@link #copyFromHost}. Engines on the
 * same GPU attach its fd with {@link VmmImport}. {@link #close()} unmaps, frees and releases once.
 */
public final class DeviceAllocation implements AutoCloseable {
    private final MappedAllocation allocation;
    private final int device;
    private final String name;
    private final AtomicBoolean closed = new AtomicBoolean();

    private DeviceAllocation(MappedAllocation allocation, int device, String name) {
        this.allocation = allocation;
        this.device = device;
        this.name = name;
    }

    /** Creates {@code bytes} (rounded up to the granularity) on GPU {@code device}. */
    public static DeviceAllocation create(long bytes, int device, String name) {
        VmmSupport.checkDevice(Cuda.device(device));
        Location gpu = Location.device(device);
        return new DeviceAllocation(MappedAllocation.create(bytes, gpu, gpu, device, name), device, name);
    }

    /** Copies {@code length} bytes from host memory at {@code hostAddress} to {@code offset}. */
    public void copyFromHost(long hostAddress, long offset, long length) {
        if (offset < 0 || length < 0 || offset + length > size()) {
            throw new IndexOutOfBoundsException("device allocation " + name + ": [" + offset + ", " + (offset + length)
                    + ") is outside its " + size() + " bytes");
        }
        Cuda.copyHostToDevice(device, devicePointer() + offset, hostAddress, length);
    }

    /** The device address of the first byte in this process. Throws once closed. */
    public long devicePointer() {
        if (closed.get()) {
            throw new IllegalStateException("device allocation " + name + " is closed");
        }
        return allocation.address();
    }

    public long size() {
        return allocation.size();
    }

    public int device() {
        return device;
    }

    /** A fresh POSIX fd for this allocation, owned by the caller; each call exports anew. */
    public Fd exportFd() {
        devicePointer();
        return allocation.exportFd();
    }

    public boolean isOpen() {
        return !closed.get();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            allocation.close();
        }
    }
}
