package io.engramhost.os;

import com.kenai.jffi.MemoryIO;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import sun.misc.Unsafe;

/**
 * Raw reads of native memory and byte arrays alike (sun.misc.Unsafe from jdk.unsupported), for the hot
 * paths that cannot afford a JNR call per word: digests and table views. Nothing here checks that an
 * address is mapped: the callers hold the mapping's owner open (see the client's table views).
 */
public final class RawMemory {
    private static final Unsafe UNSAFE;
    public static final long BYTE_ARRAY_BASE = Unsafe.ARRAY_BYTE_BASE_OFFSET;
    private static final boolean BIG_ENDIAN = ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN;

    static {
        try {
            Field f = Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            UNSAFE = (Unsafe) f.get(null);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError("sun.misc.Unsafe is not reachable: " + e);
        }
    }

    private RawMemory() {
    }

    /**
     * A direct buffer over {@code length} bytes of native memory at {@code address} (JNI's NewDirectByteBuffer,
     * through jffi), for channel reads and writes straight into memory the caller owns: the buffer does not own it,
     * and must not be used once the memory is gone.
     */
    public static ByteBuffer buffer(long address, int length) {
        checkRange(address, length);
        return MemoryIO.getInstance().newDirectByteBuffer(address, length);
    }

    /** Copies {@code length} bytes from native {@code address} into {@code dst[offset...]}. */
    public static void copy(long address, byte[] dst, int offset, int length) {
        UNSAFE.copyMemory(null, address, dst, BYTE_ARRAY_BASE + offset, length);
    }

    /** Copies between native memory (base null) and arrays, as Unsafe.copyMemory. */
    public static void copy(Object srcBase, long srcOffset, Object dstBase, long dstOffset, long length) {
        UNSAFE.copyMemory(srcBase, srcOffset, dstBase, dstOffset, length);
    }

    public static void putLong(long address, long value) {
        UNSAFE.putLong(address, value);
    }

    public static void putByte(long address, byte value) {
        UNSAFE.putByte(address, value);
    }

    /** Sets {@code length} bytes at native {@code address} to {@code value}. */
    public static void fill(long address, long length, byte value) {
        UNSAFE.setMemory(address, length, value);
    }

    public static byte getByte(long address) {
        return UNSAFE.getByte(address);
    }

    public static long getLong(long address) {
        return UNSAFE.getLong(address);
    }

    /** The little-endian long at {@code base + offset} (base null: a native address). */
    public static long getLongLE(Object base, long offset) {
        long v = UNSAFE.getLong(base, offset);
        return BIG_ENDIAN ? Long.reverseBytes(v) : v;
    }

    /** The little-endian unsigned int at {@code base + offset}. */
    public static long getUnsignedIntLE(Object base, long offset) {
        int v = UNSAFE.getInt(base, offset);
        return (BIG_ENDIAN ? Integer.reverseBytes(v) : v) & 0xffffffffL;
    }

    public static int getUnsignedByte(Object base, long offset) {
        return UNSAFE.getByte(base, offset) & 0xff;
    }

    /** Checks a native range: a non-zero address unless empty, a non-negative length, no wrap-around. */
    public static void checkRange(long address, long length) {
        if (length < 0) {
            throw new IllegalArgumentException("negative length " + length);
        }
        if (length > 0 && address == 0) {
            throw new IllegalArgumentException("null address for " + length + " bytes");
        }
        if (address + length < address && address + length != 0) {
            throw new IllegalArgumentException("range 0x" + Long.toHexString(address) + "+" + length + " wraps around");
        }
    }
}
