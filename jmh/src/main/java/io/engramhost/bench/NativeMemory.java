package io.engramhost.bench;

import java.lang.reflect.Field;
import sun.misc.Unsafe;

/** Raw native memory access for the benchmarks' fills and baselines (no bounds checks: callers check). */
final class NativeMemory {
    static final Unsafe UNSAFE;
    static final long BYTE_ARRAY_BASE;

    static {
        try {
            Field f = Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            UNSAFE = (Unsafe) f.get(null);
            BYTE_ARRAY_BASE = UNSAFE.arrayBaseOffset(byte[].class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private NativeMemory() {
    }

    /** Fills {@code length} bytes (a multiple of 8) at {@code address} with xorshift64 output from {@code seed}. */
    static void fillRandom(long address, long length, long seed) {
        if (length % 8 != 0) {
            throw new IllegalArgumentException("fill length " + length + " is not a multiple of 8");
        }
        long x = seed == 0 ? 0x9e3779b97f4a7c15L : seed;
        for (long at = 0; at < length; at += 8) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            UNSAFE.putLong(address + at, x);
        }
    }

    /** Copies {@code length} bytes from native {@code address} into {@code dst[offset...]}. */
    static void copy(long address, byte[] dst, int offset, int length) {
        UNSAFE.copyMemory(null, address, dst, BYTE_ARRAY_BASE + offset, length);
    }
}
