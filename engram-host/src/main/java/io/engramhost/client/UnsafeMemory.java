package io.engramhost.client;

import java.lang.reflect.Field;
import sun.misc.Unsafe;

/** Raw reads of mapped memory. Callers check bounds and liveness first (see {@link TableView}). */
final class UnsafeMemory {
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

    private UnsafeMemory() {
    }

    static void copy(long address, byte[] dst, int offset, int length) {
        UNSAFE.copyMemory(null, address, dst, BYTE_ARRAY_BASE + offset, length);
    }
}
