package io.engramhost.vmm;

import io.engramhost.cuda.Location;
import io.engramhost.cuda.MemHandle;
import io.engramhost.cuda.VaMapping;
import io.engramhost.cuda.VaRange;
import io.engramhost.os.Fd;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;

/**
 * An exportable allocation mapped in its creator: handle, VA range, mapping, with access for one
 * location. Closes in reverse order; a failure half-way releases what was built.
 */
final class MappedAllocation implements AutoCloseable {
    final MemHandle handle;
    /** The range it is mapped in when it owns that range; null when the range is another's ({@link #createIn}). */
    final VaRange range;
    final VaMapping mapping;
    final long requested;

    private MappedAllocation(MemHandle handle, VaRange range, VaMapping mapping, long requested) {
        this.handle = handle;
        this.range = range;
        this.mapping = mapping;
        this.requested = requested;
    }

    static MappedAllocation create(long bytes, Location where, Location accessor, int device, String name) {
        return createIn(null, 0, bytes, where, accessor, device, name);
    }

    /**
     * As {@link #create}, mapped at {@code offset} of {@code in} (a multiple of the granularity, with room for the
     * size rounded up), a range the caller owns and frees after this allocation is closed; null: a range of its own.
     */
    static MappedAllocation createIn(VaRange in, long offset, long bytes, Location where, Location accessor, int device,
            String name) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("allocation " + name + ": size must be positive, was " + bytes);
        }
        long g = MemHandle.granularity(where, true, device, false);
        long size = Bytes.roundUp(bytes, g);
        if (in != null && (offset < 0 || offset % g != 0 || offset > in.size() || size > in.size() - offset)) {
            throw new IllegalArgumentException("allocation " + name + ": " + Bytes.format(size) + " at offset " + offset
                    + " does not fit a range of " + Bytes.format(in.size()) + " on " + Bytes.format(g) + " boundaries");
        }
        MemHandle handle = MemHandle.create(size, where, true, device, name);
        VaRange range = null;
        VaMapping mapping = null;
        try {
            range = in == null ? VaRange.reserve(size, g, device, name) : null;
            mapping = VaMapping.map(in == null ? range : in, in == null ? 0 : offset, handle);
            mapping.setAccess(accessor, true);
            return new MappedAllocation(handle, range, mapping, bytes);
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, handle, range, mapping);
            throw e;
        }
    }

    Fd exportFd() {
        return handle.exportFd();
    }

    long address() {
        return mapping.address();
    }

    long size() {
        return handle.size();
    }

    @Override
    public void close() {
        Closer.closeAll(handle, range, mapping);
    }
}
