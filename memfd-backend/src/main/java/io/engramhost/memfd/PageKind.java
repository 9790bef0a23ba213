package io.engramhost.memfd;

import io.engramhost.os.Posix;

/** The pages a memfd is backed by: 4 KiB shmem pages, or 2 MiB hugetlb pages (needs vm.nr_hugepages). */
public enum PageKind {
    SMALL(4096L, 0),
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
