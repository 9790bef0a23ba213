package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;

import io.engramhost.os.internal.LibCHolder;

/**
 * A file's pages in the page cache, for benchmarks that need a cold cache and the tests that check
 * one: drop them (posix_fadvise DONTNEED) and count the ones still resident (mincore).
 */
public final class PageCache {
    private static final int POSIX_FADV_DONTNEED = 4;

    private PageCache() {
    }

    /**
     * Asks the kernel to drop {@code fd}'s clean pages from the page cache (posix_fadvise DONTNEED over the
     * whole file). Only a hint: pages of tmpfs, dirty or mapped pages stay; {@link #residentPages} tells.
     */
    public static void drop(FdRef fd) {
        int rc = LIBC.posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
        if (rc != 0) {
            throw new NativeException("posix_fadvise(" + fd.what() + ", 0, 0, POSIX_FADV_DONTNEED)", rc);
        }
    }

    /**
     * How many of the pages (of {@link Posix#pageSize()}) of the first {@code length} bytes of {@code fd}
     * are in the page cache (mincore).
     */
    public static long residentPages(FdRef fd, long length) {
        if (length <= 0) {
            return 0;
        }
        long pages = (length + Posix.pageSize() - 1) / Posix.pageSize();
        try (Mapping view = Posix.mmap(length, Posix.PROT_READ, Posix.MAP_SHARED, fd, 0);
                Mapping vec = Posix.mmapAnonymous(pages, "mincore vector of " + fd.what())) {
            if (LIBC.mincore(view.address(), length, vec.address()) != 0) {
                throw new NativeException("mincore(" + fd.what() + ", " + length + " bytes)", LibCHolder.errno());
            }
            long resident = 0;
            for (long i = 0; i < pages; i++) {
                resident += RawMemory.getByte(vec.address() + i) & 1;
            }
            return resident;
        }
    }
}
