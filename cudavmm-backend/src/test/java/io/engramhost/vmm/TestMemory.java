package io.engramhost.vmm;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.internal.LibCHolder;
import jnr.ffi.Pointer;

/** Reproducible pseudo-random bytes (xorshift64*) in native memory and in memfds, for tests. */
final class TestMemory {
    static final Pointer MEMORY = Pointer.wrap(LibCHolder.RUNTIME, 0L);

    private TestMemory() {
    }

    static void fill(long address, long length, long seed) {
        long x = seed | 1;
        long off = 0;
        for (; off + 8 <= length; off += 8) {
            x ^= x >>> 12;
            x ^= x << 25;
            x ^= x >>> 27;
            MEMORY.putLong(address + off, x * 0x2545F4914F6CDD1DL);
        }
        for (; off < length; off++) {
            MEMORY.putByte(address + off, (byte) (off * 31 + seed));
        }
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
