package io.engramhost.os;

import static io.engramhost.os.internal.LibCMoreHolder.MORE;

import io.engramhost.os.internal.LibCHolder;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * A file's pages in the page cache: drop them (posix_fadvise DONTNEED), count the ones resident (mincore),
 * or ask range by range through a {@link Residency} (the loader reads resident ranges through the cache and
 * the rest with O_DIRECT).
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
        int rc = MORE.posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
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
            if (MORE.mincore(view.address(), length, vec.address()) != 0) {
                throw new NativeException("mincore(" + fd.what() + ", " + length + " bytes)", LibCHolder.errno());
            }
            long resident = 0;
            for (long i = 0; i < pages; i++) {
                resident += RawMemory.getByte(vec.address() + i) & 1;
            }
            return resident;
        }
    }

    /**
     * A read-only mapping of the first {@code length} bytes of {@code fd}, never touched, for asking mincore which of
     * its pages are cached. The caller owns it and closes it.
     */
    public static Residency residency(FdRef fd, long length) {
        return new Residency(Posix.mmap(Math.max(length, 1), Posix.PROT_READ, Posix.MAP_SHARED, fd, 0), length);
    }

    /** See {@link #residency}. Thread-safe: each call has its own vector. */
    public static final class Residency implements AutoCloseable {
        private final Mapping view;
        private final long length;

        private Residency(Mapping view, long length) {
            this.view = view;
            this.length = length;
        }

        /** How many of the pages of {@code [offset, offset + len)} (clipped to the file) are in the page cache. */
        public long residentPages(long offset, long len) {
            long page = Posix.pageSize();
            long start = Math.max(0, offset) / page * page;
            long end = Math.min(length, offset + len);
            if (end <= start) {
                return 0;
            }
            long pages = (end - start + page - 1) / page;
            Pointer vec = Memory.allocateDirect(LibCHolder.RUNTIME, (int) pages);
            if (MORE.mincore(view.address() + start, end - start, vec.address()) != 0) {
                throw new NativeException("mincore(" + view.what() + ", " + (end - start) + " bytes at " + start + ")",
                        LibCHolder.errno());
            }
            long resident = 0;
            for (long i = 0; i < pages; i++) {
                resident += RawMemory.getByte(vec.address() + i) & 1;
            }
            return resident;
        }

        @Override
        public void close() {
            view.close();
        }
    }
}
