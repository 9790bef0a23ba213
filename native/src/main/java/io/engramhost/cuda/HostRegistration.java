package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import io.engramhost.os.Posix;
import io.engramhost.util.Bytes;
import java.util.ArrayList;
import java.util.List;
import jnr.ffi.Pointer;

/**
 * Owns one page-locked registration of host memory (cuMemHostRegister), made in chunks of at most
 * {@link #MAX_CHUNK} (a single call of 512 GiB or more fails on r580 drivers), with a device
 * pointer for the whole range. A PROT_READ mapping (a sealed memfd) must be registered read-only.
 * {@link #close()} unregisters every chunk once.
 */
public final class HostRegistration extends CudaOwner {
    public static final long MAX_CHUNK = 64L << 30;
    /** CU_MEMHOSTREGISTER_PORTABLE, DEVICEMAP, READ_ONLY. */
    public static final int FLAG_PORTABLE = 0x1;
    public static final int FLAG_DEVICEMAP = 0x2;
    public static final int FLAG_READ_ONLY = 0x8;

    private final long address;
    private final long length;
    private final long devicePointer;
    private final List<Long> chunks;

    private HostRegistration(long address, long length, long devicePointer, List<Long> chunks, int device) {
        super(device, "0x" + Long.toHexString(address));
        this.address = address;
        this.length = length;
        this.devicePointer = devicePointer;
        this.chunks = chunks;
    }

    /** Registers {@code [address, address+length)} for {@code device}, in chunks of {@link #MAX_CHUNK}. */
    public static HostRegistration register(long address, long length, int device, boolean readOnly) {
        return register(address, length, device, readOnly, MAX_CHUNK);
    }

    /** As {@link #register(long, long, int, boolean)}, with chunks of {@code chunkBytes} (page multiple). */
    public static HostRegistration register(long address, long length, int device, boolean readOnly, long chunkBytes) {
        long page = Posix.pageSize();
        if (address % page != 0 || length <= 0) {
            throw new IllegalArgumentException("cuMemHostRegister: address 0x" + Long.toHexString(address)
                    + " must be page-aligned and length " + length + " positive");
        }
        if (chunkBytes <= 0 || chunkBytes % page != 0 || chunkBytes > MAX_CHUNK) {
            throw new IllegalArgumentException("cuMemHostRegister: chunk " + chunkBytes
                    + " must be a positive multiple of the page size " + page + " of at most " + Bytes.format(MAX_CHUNK));
        }
        CudaDevice dev = Cuda.device(device);
        if (readOnly && !dev.readOnlyHostRegister()) {
            throw new IllegalStateException("cannot register " + Bytes.format(length) + " read-only for " + dev.label()
                    + ": it lacks READ_ONLY_HOST_REGISTER_SUPPORTED, and a PROT_READ mapping needs it");
        }
        Cuda.useDevice(device);
        int flags = FLAG_PORTABLE | FLAG_DEVICEMAP | (readOnly ? FLAG_READ_ONLY : 0);
        List<Long> done = new ArrayList<>();
        try {
            for (long off = 0; off < length; off += chunkBytes) {
                long n = Math.min(chunkBytes, length - off);
                Cuda.check(Cuda.lib().cuMemHostRegister_v2(address + off, n, flags),
                        "cuMemHostRegister(" + Bytes.format(n) + " at +" + off + " of " + Bytes.format(length)
                                + (readOnly ? ", READ_ONLY|DEVICEMAP|PORTABLE)" : ", DEVICEMAP|PORTABLE)"));
                done.add(address + off);
            }
            long base = devicePointer(address, "the start");
            for (int i = 1; i < done.size(); i++) {
                long p = devicePointer(done.get(i), "chunk " + i);
                if (p != base + (done.get(i) - address)) {
                    throw new IllegalStateException("cuMemHostGetDevicePointer: chunk " + i + " maps to 0x"
                            + Long.toHexString(p) + ", not contiguous with 0x" + Long.toHexString(base));
                }
            }
            return new HostRegistration(address, length, base, List.copyOf(done), device);
        } catch (RuntimeException e) {
            for (long chunk : done) {
                Cuda.lib().cuMemHostUnregister(chunk);
            }
            throw e;
        }
    }

    private static long devicePointer(long host, String what) {
        Pointer out = CuStructs.zeroed(8);
        Cuda.check(Cuda.lib().cuMemHostGetDevicePointer_v2(out, host, 0), "cuMemHostGetDevicePointer(" + what + ")");
        return out.getLong(0);
    }

    /** The GPU's address of the first byte. Throws once closed. */
    public long devicePointer() {
        checkOpen("host registration at");
        return devicePointer;
    }

    public long hostAddress() {
        return address;
    }

    public long length() {
        return length;
    }

    public int chunkCount() {
        return chunks.size();
    }

    @Override
    protected void release() {
        for (long chunk : chunks) {
            Cuda.check(Cuda.lib().cuMemHostUnregister(chunk), "cuMemHostUnregister(0x" + Long.toHexString(chunk) + ")");
        }
    }
}
