package io.engramhost.memfd;

import io.engramhost.os.Posix;

/**
 * The pages a memfd is backed by: the system's base pages as shmem ({@link Posix#pageSize()}: 4 KiB on
 * x86-64, 4, 16 or 64 KiB on aarch64), or 2 MiB hugetlb pages (reserved beforehand; on x86-64 by
 * vm.nr_hugepages, where 2 MiB is not the default huge page size by hugepages-2048kB/nr_hugepages).
 */
public enum PageKind {
    SMALL(Posix.pageSize(), 0),
    HUGE_2M(2L << 20, Posix.MFD_HUGETLB | Posix.MFD_HUGE_2MB);

    private final long pageSize;
    private final int memfdFlags;

    PageKind(long pageSize, int memfdFlags) {
        this.pageSize = pageSize;
        this.memfdFlags = memfdFlags;
    }

    public long pageSize() {
        return pageSize;
    }

    int memfdFlags() {
        return memfdFlags;
    }

    public boolean hugetlb() {
        return this != SMALL;
    }

    /** {@code bytes} rounded up to a whole number of pages (at least one page). */
    public long roundUp(long bytes) {
        long b = Math.max(bytes, 1);
        return (b + pageSize - 1) / pageSize * pageSize;
    }
}
