package io.engramhost.memfd;

import io.engramhost.numa.HugePagePool;
import io.engramhost.numa.Meminfo;
import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.util.Bytes;
import java.util.function.Consumer;

/**
 * One memfd owned by the daemon. While loading it also owns a writable shared mapping of the
 * whole memfd; {@link #seal()} drops that mapping, then adds SHRINK, GROW, WRITE and SEAL: the kernel grants WRITE
 * only while no writable mapping of the memfd exists anywhere, so a memfd that carries it can never be written
 * again by anyone, through any mapping made before or after. The size is fixed and no seal can be added any more.
 * Clients refuse a memfd without all of them (docs/protocol.md, docs/security.md).
 */
public final class MemfdRegion implements AutoCloseable {
    /** The seals every served memfd carries; SEAL last of all, so the set is final. */
    public static final int SEALS = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW
            | Posix.F_SEAL_WRITE;

    private final Fd fd;
    private final long size;
    private final PageKind pages;
    private Mapping writable;

    private MemfdRegion(Fd fd, long size, PageKind pages, Mapping writable) {
        this.fd = fd;
        this.size = size;
        this.pages = pages;
        this.writable = writable;
    }

    /**
     * Creates a memfd of {@code size} bytes (a whole number of pages) and maps it writable.
     * {@code beforeTouch} runs on the fresh mapping before any page is touched: the place to set a
     * NUMA policy, which on a shared mapping applies to the file.
     */
    public static MemfdRegion create(String name, long size, PageKind pages, Consumer<Mapping> beforeTouch) {
        if (size <= 0 || size % pages.pageSize() != 0) {
            throw new IllegalArgumentException("memfd " + name + ": size " + size + " is not a positive multiple of "
                    + pages.pageSize());
        }
        Fd fd = Posix.memfdCreate(name, Posix.MFD_ALLOW_SEALING | pages.memfdFlags());
        Mapping mapping = null;
        try {
            Posix.ftruncate(fd, size);
            try {
                mapping = Posix.mmap(size, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0);
            } catch (NativeException e) {
                if (pages.hugetlb() && e.errno() == Errno.ENOMEM) {
                    throw new NativeException(e.call(), e.errno(), "not enough " + Bytes.exact(pages.pageSize())
                            + " huge pages reserved: this memfd needs " + size / pages.pageSize() + "; reserve them with "
                            + howToReserve(pages.pageSize()));
                }
                throw e;
            }
            if (beforeTouch != null) {
                beforeTouch.accept(mapping);
            }
            return new MemfdRegion(fd, size, pages, mapping);
        } catch (RuntimeException e) {
            if (mapping != null) {
                mapping.close();
            }
            fd.close();
            throw e;
        }
    }

    /** vm.nr_hugepages reserves pages of the default huge page size only (512 MiB on aarch64 with 64 KiB pages). */
    private static String howToReserve(long pageSize) {
        long dflt;
        try {
            dflt = Meminfo.systemDefaultHugePageSize();
        } catch (RuntimeException unreadable) {
            dflt = 0;
        }
        return dflt == pageSize ? "sysctl vm.nr_hugepages=N"
                : "echo N > /sys/kernel/mm/hugepages/" + HugePagePool.dirName(pageSize) + "/nr_hugepages";
    }

    public Fd fd() {
        return fd;
    }

    public long size() {
        return size;
    }

    public PageKind pages() {
        return pages;
    }

    /** The daemon's writable mapping; valid until {@link #seal()}. */
    public Mapping writable() {
        if (writable == null) {
            throw new IllegalStateException(fd.what() + " is sealed: no writable mapping any more");
        }
        return writable;
    }

    public boolean sealed() {
        return writable == null;
    }

    /** Unmaps the writable view, then seals the memfd against writes, growth, shrinking and further seals. */
    public void seal() {
        writable.close();
        writable = null;
        Posix.addSeals(fd, SEALS); // EBUSY if any writable mapping of it were left: then nothing is served
    }

    @Override
    public void close() {
        try {
            if (writable != null) {
                writable.close();
                writable = null;
            }
        } finally {
            fd.close();
        }
    }
}
