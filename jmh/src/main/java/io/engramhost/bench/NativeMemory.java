package io.engramhost.bench;

import io.engramhost.os.RawMemory;
import java.util.stream.LongStream;

/** The benchmarks' pseudo-random fills of native memory (through {@link RawMemory}; no bounds checks: callers check). */
final class NativeMemory {
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
            RawMemory.putLong(address + at, x);
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
            fillRandom(address + at, Math.min(FILL_CHUNK, length - at), chunkSeed(seed, i));
        });
    }

    /** The seed of chunk {@code chunk}'s stream in {@link #fillRandomParallel}. */
    static long chunkSeed(long seed, long chunk) {
        return splitmix64(seed + chunk * 0x9e3779b97f4a7c15L);
    }

    private static long splitmix64(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }
}
