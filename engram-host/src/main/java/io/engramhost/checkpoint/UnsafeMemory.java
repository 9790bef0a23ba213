package io.engramhost.checkpoint;

import java.lang.reflect.Field;
import java.nio.ByteOrder;
import sun.misc.Unsafe;

/** sun.misc.Unsafe (jdk.unsupported) for reading native memory and byte arrays alike, little-endian. */
final class UnsafeMemory {
    static final Unsafe UNSAFE;
    static final long BYTE_ARRAY_BASE = Unsafe.ARRAY_BYTE_BASE_OFFSET;
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

    private UnsafeMemory() {
    }

    /** The little-endian long at {@code base + offset} (base null: a native address). */
    static long getLongLE(Object base, long offset) {
        long v = UNSAFE.getLong(base, offset);
        return BIG_ENDIAN ? Long.reverseBytes(v) : v;
    }

    /** The little-endian unsigned int at {@code base + offset}. */
    static long getUnsignedIntLE(Object base, long offset) {
        int v = UNSAFE.getInt(base, offset);
        return (BIG_ENDIAN ? Integer.reverseBytes(v) : v) & 0xffffffffL;
    }

    static int getUnsignedByte(Object base, long offset) {
        return UNSAFE.getByte(base, offset) & 0xff;
    }

    /** Checks a native range: a non-zero address unless empty, a non-negative length, no wrap-around. */
    static void checkRange(long address, long length) {
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
