package io.engramhost.vmm;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.Location;
import io.engramhost.cuda.MemHandle;
import io.engramhost.cuda.VaRange;
import io.engramhost.os.Fd;
import io.engramhost.util.Bytes;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Daemon side: one table's memory as a CUDA HOST_NUMA allocation (cuMemCreate, POSIX fd handle),
 * its size rounded up to the allocation granularity, mapped read-write for the CPU so the daemon
 * can fill it (e.g. {@code Posix.preadFully(fd, hostAddress(), ...)}). Engines attach its fd with
 * {@link VmmImport}. {@link #close()} unmaps, frees the VA range and releases the handle, once;
 * engines that imported it keep the memory alive until they release it too.
 */
public final class HostNumaAllocation implements AutoCloseable {
    private final MappedAllocation allocation;
    private final int numaNode;
    private final String name;
    private final long createNanos;
    private final AtomicBoolean closed = new AtomicBoolean();

    private HostNumaAllocation(MappedAllocation allocation, int numaNode, String name, long createNanos) {
        this.allocation = allocation;
        this.numaNode = numaNode;
        this.name = name;
        this.createNanos = createNanos;
    }

    /** Creates {@code bytes} (rounded up) on host NUMA node {@code numaNode}, using GPU 0's context. */
    public static HostNumaAllocation create(long bytes, int numaNode, String name) {
        return create(bytes, numaNode, name, 0);
    }

    /**
     * Creates {@code bytes} (rounded up) on host NUMA node {@code numaNode} (0 on a machine without
     * NUMA), using {@code device}'s context and checking its capabilities first.
     *
     * @throws io.engramhost.cuda.CudaUnavailableException when there is no usable CUDA driver
     * @throws VmmUnsupportedException when the GPU cannot do HOST_NUMA VMM with fd handles
     */
    public static HostNumaAllocation create(long bytes, int numaNode, String name, int device) {
        return createIn(null, 0, bytes, numaNode, name, device);
    }

    /**
     * As {@link #create(long, int, String, int)}, mapped at {@code offset} of {@code range} (reserved by the caller,
     * who frees it after closing this), so that allocations made one after another lie back to back in one range
     * ({@link #reserveRun}); null: a range of its own.
     */
    public static HostNumaAllocation createIn(VaRange range, long offset, long bytes, int numaNode, String name,
            int device) {
        if (numaNode < 0) {
            throw new IllegalArgumentException("HOST_NUMA allocation " + name + ": NUMA node must be >= 0, was "
                    + numaNode + " (use 0 on a machine without NUMA)");
        }
        if (bytes <= 0) {
            throw new IllegalArgumentException("HOST_NUMA allocation " + name + ": size must be positive, was " + bytes);
        }
        VmmSupport.check(Cuda.device(device));
        Location node = Location.hostNuma(numaNode);
        long t0 = System.nanoTime();
        MappedAllocation a = MappedAllocation.createIn(range, offset, bytes, node, node, device, name);
        return new HostNumaAllocation(a, numaNode, name, System.nanoTime() - t0);
    }

    /**
     * A VA range of {@code bytes} (rounded up to the granularity of HOST_NUMA memory on {@code numaNode}) for
     * allocations made into it with {@link #createIn}; the caller owns it and closes it after them.
     */
    public static VaRange reserveRun(long bytes, int numaNode, String name, int device) {
        VmmSupport.check(Cuda.device(device));
        long g = MemHandle.granularity(Location.hostNuma(numaNode), true, device, false);
        return VaRange.reserve(Bytes.roundUp(bytes, g), g, device, name);
    }

    /** The CPU address of the first byte, read-write. Throws once closed. */
    public long hostAddress() {
        checkOpen();
        return allocation.address();
    }

    /** The allocation's size: the requested bytes rounded up to the granularity. */
    public long size() {
        return allocation.size();
    }

    public long requestedBytes() {
        return allocation.requested;
    }

    public int numaNode() {
        return numaNode;
    }

    public String name() {
        return name;
    }

    /** Nanoseconds that create took (cuMemCreate commits the memory). */
    public long createNanos() {
        return createNanos;
    }

    /**
     * A fresh POSIX fd for this allocation, owned by the caller (close it once sent). Each call
     * exports anew; nothing is kept here.
     */
    public Fd exportFd() {
        checkOpen();
        return allocation.exportFd();
    }

    public boolean isOpen() {
        return !closed.get();
    }

    private void checkOpen() {
        if (closed.get()) {
            throw new IllegalStateException("HOST_NUMA allocation " + name + " is closed");
        }
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            allocation.close();
        }
    }
}
