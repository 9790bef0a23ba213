package io.engramhost.bench;

import java.lang.reflect.Field;
import java.util.stream.LongStream;
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

    /** The bytes of one seeded stream of {@link #fillRandomParallel}. */
    static final long FILL_CHUNK = 64L << 20;

    /**
     * Fills {@code length} bytes (a multiple of 8) at {@code address} with pseudo-random bytes, fast enough for
     * tables of many GiB: every {@link #FILL_CHUNK} is an xorshift64 stream of its own (seeded from {@code seed}
     * and the chunk's index through splitmix64), the chunks shared out over the common fork-join pool. The bytes
     * do not depend on the number of threads; the first touch of each page happens here, in parallel too.
     */
    static void fillRandomParallel(long address, long length, long seed) {
        if (length % 8 != 0) {
            throw new IllegalArgumentException("fill length " + length + " is not a multiple of 8");
        }
        long chunks = (length + FILL_CHUNK - 1) / FILL_CHUNK;
        LongStream.range(0, chunks).parallel().forEach(i -> {
            long at = i * FILL_CHUNK;
            fillRandom(address + at, Math.min(FILL_CHUNK, length - at), splitmix64(seed + i * 0x9e3779b97f4a7c15L));
        });
    }

    private static long splitmix64(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    /** Copies {@code length} bytes from native {@code address} into {@code dst[offset...]}. */
    static void copy(long address, byte[] dst, int offset, int length) {
        UNSAFE.copyMemory(null, address, dst, BYTE_ARRAY_BASE + offset, length);
    }
}
