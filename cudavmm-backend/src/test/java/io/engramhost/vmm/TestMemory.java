package io.engramhost.vmm;

import io.engramhost.cuda.Patterns;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import jnr.ffi.Pointer;

/** Reproducible pseudo-random bytes (native's {@link Patterns}) in native memory and in memfds, for tests. */
final class TestMemory {
    static final Pointer MEMORY = Patterns.MEMORY;

    private TestMemory() {
    }

    static void fill(long address, long length, long seed) {
        Patterns.fill(address, length, seed);
    }

    /** A memfd of {@code length} pseudo-random bytes: what a checkpoint file would be for the daemon. */
    static Fd memfd(long length, long seed) {
        Fd fd = Posix.memfdCreate("test table " + seed, 0);
        Posix.ftruncate(fd, length);
        try (Mapping m = Posix.mmap(length, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
            fill(m.address(), length, seed);
        }
        return fd;
    }
}
