package io.engramhost.cuda;

import io.engramhost.os.internal.LibCHolder;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.concurrent.atomic.AtomicBoolean;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * The kernels of {@code native/cuda/engram_kernels.cu}, loaded from the PTX in this jar onto one
 * GPU: a checksum ({@link GpuChecksum} is its CPU twin), a sequential read and a random row
 * gather. Each call waits for its kernel. Not thread-safe: one scratch buffer per instance.
 */
public final class GpuKernels implements AutoCloseable {
    public static final String PTX_RESOURCE = "engram_kernels.ptx";
    private static final int BLOCK = 256;

    private final CudaModule module;
    private final DeviceBuffer scratch;
    private final int device;
    private final int grid;
    private final AtomicBoolean closed = new AtomicBoolean();

    private GpuKernels(CudaModule module, DeviceBuffer scratch, int device, int grid) {
        this.module = module;
        this.scratch = scratch;
        this.device = device;
        this.grid = grid;
    }

    /** Loads the module on {@code device}. */
    public static GpuKernels load(int device) {
        byte[] ptx = ptx();
        CudaModule module = CudaModule.load(ptx, device, PTX_RESOURCE);
        try {
            DeviceBuffer scratch = DeviceBuffer.allocate(16, device, "kernel results");
            return new GpuKernels(module, scratch, device, Cuda.device(device).multiprocessors() * 8);
        } catch (RuntimeException e) {
            module.close();
            throw e;
        }
    }

    /** The PTX text shipped in this jar. */
    public static byte[] ptx() {
        try (InputStream in = GpuKernels.class.getResourceAsStream(PTX_RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException("resource io/engramhost/cuda/" + PTX_RESOURCE
                        + " is missing from the native jar (run `make ptx` in native/)");
            }
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/engramhost/cuda/" + PTX_RESOURCE, e);
        }
    }

    /** The checksum of {@code length} bytes at device address {@code address} (8-byte aligned). */
    public long checksum(long address, long length) {
        if (address % 8 != 0 || length < 0) {
            throw new IllegalArgumentException("checksum of 0x" + Long.toHexString(address) + "+" + length
                    + ": the address must be 8-byte aligned and the length non-negative");
        }
        scratch.fill((byte) 0);
        module.launch("engram_checksum", grid, BLOCK, 0,
                new KernelArgs().add(address).add(length).add(scratch.pointer()));
        return result(0);
    }

    /** Reads {@code length} bytes (a multiple of 16, 16-byte aligned); returns the XOR of its words. */
    public long readSequential(long address, long length) {
        if (address % 16 != 0 || length % 16 != 0 || length < 0) {
            throw new IllegalArgumentException("sequential read of 0x" + Long.toHexString(address) + "+" + length
                    + ": address and length must be multiples of 16");
        }
        scratch.fill((byte) 0);
        module.launch("engram_read_seq", grid, BLOCK, 0,
                new KernelArgs().add(address).add(length / 16).add(scratch.pointer()));
        return result(0);
    }

    /**
     * Gathers {@code count} rows of {@code rowBytes} from the table at {@code table} ({@code tableRows}
     * rows) at the ids in device memory {@code rowIds} (u64 each) into {@code out}.
     *
     * @throws IllegalArgumentException when any id is outside the table (counted on the GPU)
     */
    public void gather(long table, long tableRows, int rowBytes, long rowIds, long count, long out) {
        if (rowBytes <= 0 || count < 0 || tableRows < 0) {
            throw new IllegalArgumentException("gather: rowBytes " + rowBytes + ", count " + count + ", tableRows "
                    + tableRows + " must be positive");
        }
        scratch.fill((byte) 0);
        module.launch("engram_gather", grid, BLOCK, 0, new KernelArgs().add(table).add(tableRows).addInt(rowBytes)
                .add(rowIds).add(count).add(out).add(scratch.pointer()));
        long bad = result(0);
        if (bad != 0) {
            throw new IllegalArgumentException("gather: " + bad + " of " + count + " row ids are >= the table's "
                    + tableRows + " rows");
        }
    }

    private long result(int slot) {
        Cuda.synchronize(device);
        Pointer host = Memory.allocateDirect(LibCHolder.RUNTIME, 8, true);
        scratch.copyToHost(8L * slot, host.address(), 8);
        return host.getLong(0);
    }

    public int device() {
        return device;
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            try {
                scratch.close();
            } finally {
                module.close();
            }
        }
    }
}
