package io.engramhost.checkpoint;

import io.engramhost.os.RawMemory;
import static io.engramhost.os.RawMemory.BYTE_ARRAY_BASE;
import static io.engramhost.os.RawMemory.getLongLE;
import static io.engramhost.os.RawMemory.getUnsignedByte;
import static io.engramhost.os.RawMemory.getUnsignedIntLE;

import java.util.Objects;

/**
 * XXH64 (Yann Collet's xxHash, 64-bit): one-shot over a byte array or native memory, or streaming with
 * {@link #update}. Values are those of the reference implementation for the same bytes and seed.
 */
public final class Xxh64 {
    private static final long P1 = 0x9E3779B185EBCA87L;
    private static final long P2 = 0xC2B2AE3D27D4EB4FL;
    private static final long P3 = 0x165667B19E3779F9L;
    private static final long P4 = 0x85EBCA77C2B2AE63L;
    private static final long P5 = 0x27D4EB2F165667C5L;

    private final long seed;
    private long v1;
    private long v2;
    private long v3;
    private long v4;
    private long total;
    private final byte[] mem = new byte[32];
    private int memSize;

    /** A streaming hasher. */
    public Xxh64(long seed) {
        this.seed = seed;
        v1 = seed + P1 + P2;
        v2 = seed + P2;
        v3 = seed;
        v4 = seed - P1;
    }

    public static long hash(byte[] data, int offset, int length, long seed) {
        Objects.checkFromIndexSize(offset, length, data.length);
        return hash(data, BYTE_ARRAY_BASE + offset, length, seed);
    }

    public static long hash(byte[] data) {
        return hash(data, 0, data.length, 0);
    }

    /** XXH64 of {@code length} bytes of native memory at {@code address}, which must be readable. */
    public static long hashMemory(long address, long length, long seed) {
        RawMemory.checkRange(address, length);
        return hash(null, address, length, seed);
    }

    static long hash(Object base, long offset, long length, long seed) {
        long p = offset;
        long end = offset + length;
        long h;
        if (length >= 32) {
            long a = seed + P1 + P2;
            long b = seed + P2;
            long c = seed;
            long d = seed - P1;
            long limit = end - 32;
            do {
                a = round(a, getLongLE(base, p));
                b = round(b, getLongLE(base, p + 8));
                c = round(c, getLongLE(base, p + 16));
                d = round(d, getLongLE(base, p + 24));
                p += 32;
            } while (p <= limit);
            h = converge(a, b, c, d);
        } else {
            h = seed + P5;
        }
        h += length;
        return tail(h, base, p, end);
    }

    public Xxh64 update(byte[] data, int offset, int length) {
        Objects.checkFromIndexSize(offset, length, data.length);
        update(data, BYTE_ARRAY_BASE + offset, length);
        return this;
    }

    /** Adds {@code length} bytes of native memory at {@code address}. */
    public Xxh64 updateMemory(long address, long length) {
        RawMemory.checkRange(address, length);
        update(null, address, length);
        return this;
    }

    private void update(Object base, long p, long length) {
        total += length;
        long end = p + length;
        if (memSize + length < 32) {
            RawMemory.copy(base, p, mem, BYTE_ARRAY_BASE + memSize, length);
            memSize += (int) length;
            return;
        }
        if (memSize > 0) {
            int fill = 32 - memSize;
            RawMemory.copy(base, p, mem, BYTE_ARRAY_BASE + memSize, fill);
            stripe(mem, BYTE_ARRAY_BASE);
            p += fill;
            memSize = 0;
        }
        while (p + 32 <= end) {
            stripe(base, p);
            p += 32;
        }
        if (p < end) {
            RawMemory.copy(base, p, mem, BYTE_ARRAY_BASE, end - p);
            memSize = (int) (end - p);
        }
    }

    private void stripe(Object base, long p) {
        v1 = round(v1, getLongLE(base, p));
        v2 = round(v2, getLongLE(base, p + 8));
        v3 = round(v3, getLongLE(base, p + 16));
        v4 = round(v4, getLongLE(base, p + 24));
    }

    /** The hash of everything added so far; the hasher can go on being updated. */
    public long digest() {
        long h = total >= 32 ? converge(v1, v2, v3, v4) : seed + P5;
        h += total;
        return tail(h, mem, BYTE_ARRAY_BASE, BYTE_ARRAY_BASE + memSize);
    }

    private static long converge(long a, long b, long c, long d) {
        long h = Long.rotateLeft(a, 1) + Long.rotateLeft(b, 7) + Long.rotateLeft(c, 12) + Long.rotateLeft(d, 18);
        h = merge(h, a);
        h = merge(h, b);
        h = merge(h, c);
        return merge(h, d);
    }

    private static long tail(long h, Object base, long p, long end) {
        while (p + 8 <= end) {
            h ^= round(0, getLongLE(base, p));
            h = Long.rotateLeft(h, 27) * P1 + P4;
            p += 8;
        }
        if (p + 4 <= end) {
            h ^= getUnsignedIntLE(base, p) * P1;
            h = Long.rotateLeft(h, 23) * P2 + P3;
            p += 4;
        }
        while (p < end) {
            h ^= getUnsignedByte(base, p) * P5;
            h = Long.rotateLeft(h, 11) * P1;
            p++;
        }
        h ^= h >>> 33;
        h *= P2;
        h ^= h >>> 29;
        h *= P3;
        return h ^ (h >>> 32);
    }

    private static long round(long acc, long input) {
        acc += input * P2;
        return Long.rotateLeft(acc, 31) * P1;
    }

    private static long merge(long acc, long value) {
        acc ^= round(0, value);
        return acc * P1 + P4;
    }
}
