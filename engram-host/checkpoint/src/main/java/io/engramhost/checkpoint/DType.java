package io.engramhost.checkpoint;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * Every element type the safetensors format defines, with its width in bits. The names are the strings
 * of the JSON header ({@code "F8_E4M3"}); F4 and the F6 types are packed below one byte per element.
 */
public enum DType {
    BOOL(8), F4(4), F6_E2M3(6), F6_E3M2(6), U8(8), I8(8), F8_E5M2(8), F8_E4M3(8), F8_E8M0(8),
    I16(16), U16(16), F16(16), BF16(16), I32(32), U32(32), F32(32), C64(64), F64(64), I64(64), U64(64);

    private static final Map<String, DType> BY_NAME = new HashMap<>();

    static {
        for (DType t : values()) {
            BY_NAME.put(t.name(), t);
        }
    }

    private final int bits;

    DType(int bits) {
        this.bits = bits;
    }

    /** Width of one element in bits. */
    public int bits() {
        return bits;
    }

    /** The dtype named exactly {@code name} (case matters, as in the header). */
    public static DType parse(String name) {
        DType t = name == null ? null : BY_NAME.get(name);
        if (t == null) {
            throw new IllegalArgumentException("unknown dtype '" + name + "' (known: "
                    + Arrays.toString(values()).replaceAll("[\\[\\]]", "") + ")");
        }
        return t;
    }

    /** Number of elements of {@code shape}: 1 for a scalar ([]), 0 when any dimension is 0. */
    public static long numel(long[] shape) {
        long n = 1;
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("negative dimension " + d + " in shape " + Arrays.toString(shape));
            }
        }
        for (long d : shape) {
            if (d == 0) {
                return 0;
            }
        }
        for (long d : shape) {
            try {
                n = Math.multiplyExact(n, d);
            } catch (ArithmeticException e) {
                throw new IllegalArgumentException("shape " + Arrays.toString(shape) + " has more than 2^63 elements");
            }
        }
        return n;
    }

    /**
     * Bytes of a tensor of this dtype and {@code shape}: numel * bits / 8. For sub-byte dtypes numel * bits
     * must be a multiple of 8, since the format packs no partial byte.
     */
    public long byteLength(long[] shape) {
        long n = numel(shape);
        long bitCount;
        try {
            bitCount = Math.multiplyExact(n, (long) bits);
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException(this + " " + Arrays.toString(shape) + " is larger than 2^63 bits");
        }
        if (bitCount % 8 != 0) {
            throw new IllegalArgumentException(this + " " + Arrays.toString(shape) + " has " + n + " elements of "
                    + bits + " bits = " + bitCount + " bits, not a whole number of bytes");
        }
        return bitCount / 8;
    }
}
