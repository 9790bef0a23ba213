package io.engramhost.numa;

import io.engramhost.os.Errno;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.Syscall;
import io.engramhost.util.Bytes;
import java.lang.ref.Reference;
import java.util.Map;
import java.util.TreeMap;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * Where the pages of a range are: move_pages(0, n, pages, NULL, status, 0), which moves nothing and
 * reports each page's node, or -ENOENT for a page not yet touched.
 */
public final class Placement {
    /** Pages asked about per move_pages call. */
    static final int BATCH = 8192;

    private Placement() {
    }

    /** Every page of {@code mapping}, in pages of {@code pageSize} (the base page size, or the huge page size). */
    public static PlacementReport verify(Mapping mapping, long pageSize) {
        return verify(mapping.address(), mapping.length(), pageSize);
    }

    /** Every page of {@code [address, address + length)}, in pages of {@code pageSize}. */
    public static PlacementReport verify(long address, long length, long pageSize) {
        Numa.checkRange(address, length, "move_pages");
        if (pageSize < Posix.pageSize() || Long.bitCount(pageSize) != 1) {
            throw new IllegalArgumentException("move_pages: page size " + pageSize + " is not a power of two >= "
                    + Posix.pageSize());
        }
        if (address % pageSize != 0) {
            throw new IllegalArgumentException("move_pages: address 0x" + Long.toHexString(address)
                    + " is not aligned to the page size " + Bytes.exact(pageSize));
        }
        long count = (length + pageSize - 1) / pageSize;
        Pointer pages = Memory.allocateDirect(Numa.RUNTIME, 8L * Math.min(count, BATCH), false);
        Pointer status = Memory.allocateDirect(Numa.RUNTIME, 4L * Math.min(count, BATCH), false);
        Map<Integer, Long> byNode = new TreeMap<>();
        Map<Integer, Long> errors = new TreeMap<>();
        long notPresent = 0;
        for (long first = 0; first < count; first += BATCH) {
            int n = (int) Math.min(BATCH, count - first);
            for (int i = 0; i < n; i++) {
                pages.putLong(8L * i, address + (first + i) * pageSize);
                status.putInt(4L * i, Integer.MIN_VALUE);
            }
            long r = Posix.syscallErrno(Syscall.MOVE_PAGES, 0, n, pages.address(), 0, status.address(), 0);
            if (r < 0) {
                throw Numa.failure("move_pages", "move_pages(0x" + Long.toHexString(address + first * pageSize)
                        + ", pages=" + n + ")", (int) -r);
            }
            for (int i = 0; i < n; i++) {
                int s = status.getInt(4L * i);
                if (s >= 0) {
                    byNode.merge(s, 1L, Long::sum);
                } else if (s == -Errno.ENOENT) {
                    notPresent++;
                } else {
                    errors.merge(-s, 1L, Long::sum);
                }
            }
        }
        Reference.reachabilityFence(pages);
        Reference.reachabilityFence(status);
        return new PlacementReport(pageSize, count, byNode, notPresent, errors);
    }
}
