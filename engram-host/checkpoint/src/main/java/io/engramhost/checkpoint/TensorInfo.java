package io.engramhost.checkpoint;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.Objects;

/**
 * One tensor of a checkpoint file: its name, dtype and shape, and where its bytes lie: {@code offset} is
 * absolute in {@code file} (8 + header length + the begin of its data_offsets), {@code length} in bytes
 * (always dtype x shape: the constructor checks it).
 */
public record TensorInfo(String name, DType dtype, long[] shape, Path file, long offset, long length) {

    public TensorInfo {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(dtype, "dtype");
        Objects.requireNonNull(file, "file");
        shape = shape.clone();
        if (offset < 0) {
            throw new IllegalArgumentException("tensor '" + name + "': negative offset " + offset);
        }
        long needed = dtype.byteLength(shape);
        if (length != needed) {
            throw new IllegalArgumentException("tensor '" + name + "': " + dtype + " " + Arrays.toString(shape)
                    + " needs " + needed + " bytes, not " + length);
        }
    }

    /** A copy of the shape. */
    @Override
    public long[] shape() {
        return shape.clone();
    }

    public int rank() {
        return shape.length;
    }

    /** Dimension {@code i} of the shape. */
    public long dim(int i) {
        return shape[i];
    }

    /** Number of elements: 1 for a scalar, 0 when any dimension is 0. */
    public long numel() {
        return DType.numel(shape);
    }

    /** e.g. {@code F8_E4M3 [384, 256]}. */
    public String describe() {
        return dtype + " " + Arrays.toString(shape);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TensorInfo t && name.equals(t.name) && dtype == t.dtype && Arrays.equals(shape, t.shape)
                && file.equals(t.file) && offset == t.offset && length == t.length;
    }

    @Override
    public int hashCode() {
        return Objects.hash(name, dtype, Arrays.hashCode(shape), file, offset, length);
    }

    @Override
    public String toString() {
        return "TensorInfo[" + name + " " + describe() + " @" + file + "+" + offset + " len=" + length + "]";
    }
}
