package io.engramhost.cuda;

import io.engramhost.os.internal.LibCHolder;
import jnr.ffi.Pointer;

/** Fills native memory with reproducible pseudo-random bytes (xorshift64*), for tests of this module and cudavmm-backend. */
public final class Patterns {
    public static final Pointer MEMORY = Pointer.wrap(LibCHolder.RUNTIME, 0L);

    private Patterns() {
    }

    public static void fill(long address, long length, long seed) {
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
}
