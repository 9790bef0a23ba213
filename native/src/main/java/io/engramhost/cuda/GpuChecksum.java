package io.engramhost.cuda;

import io.engramhost.os.RawMemory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The checksum that the {@code engram_checksum} kernel computes, on the CPU: {@code length} plus
 * the sum (mod 2^64) over the 8-byte little-endian words w_i of {@code rotl(w_i, i mod 64) xor
 * (i * 0x9E3779B97F4A7C15)}; the last {@code length % 8} bytes form one more word, zero-padded.
 * Position-sensitive, so a moved or swapped word changes it.
 */
public final class GpuChecksum {
    static final long GOLDEN = 0x9E3779B97F4A7C15L;

    private GpuChecksum() {
    }

    /** One word's contribution. */
    static long mix(long word, long index) {
        return Long.rotateLeft(word, (int) (index & 63)) ^ (index * GOLDEN);
    }

    /** The checksum of {@code length} bytes of native memory at {@code address} (8-byte aligned). */
    public static long cpu(long address, long length) {
        if (address % 8 != 0 || length < 0) {
            throw new IllegalArgumentException("checksum of 0x" + Long.toHexString(address) + "+" + length
                    + ": the address must be 8-byte aligned and the length non-negative");
        }
        long words = length >>> 3;
        long acc = 0;
        for (long i = 0; i < words; i++) {
            acc += mix(RawMemory.getLong(address + 8 * i), i);
        }
        int tail = (int) (length & 7);
        if (tail != 0) {
            long w = 0;
            for (int k = 0; k < tail; k++) {
                w |= (RawMemory.getByte(address + 8 * words + k) & 0xffL) << (8 * k);
            }
            acc += mix(w, words);
        }
        return acc + length;
    }

    /** The checksum of the bytes from {@code buffer}'s position to its limit. */
    public static long cpu(ByteBuffer buffer) {
        ByteBuffer b = buffer.slice().order(ByteOrder.LITTLE_ENDIAN);
        long length = b.remaining();
        long acc = 0;
        long i = 0;
        while (b.remaining() >= 8) {
            acc += mix(b.getLong(), i++);
        }
        if (b.hasRemaining()) {
            long w = 0;
            for (int k = 0; b.hasRemaining(); k++) {
                w |= (b.get() & 0xffL) << (8 * k);
            }
            acc += mix(w, i);
        }
        return acc + length;
    }

    /** What {@code engram_read_seq} returns: the XOR of every 8-byte word (length a multiple of 16). */
    public static long xorWords(long address, long length) {
        long acc = 0;
        for (long off = 0; off < length; off += 8) {
            acc ^= RawMemory.getLong(address + off);
        }
        return acc;
    }
}
