package io.engramhost.os;

import io.engramhost.os.internal.LibCHolder;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Owns one mmap'd range. {@link #close()} unmaps it once; a second close does nothing.
 * {@link #address()} throws once closed, so no caller reads an unmapped range through it.
 */
public final class Mapping implements AutoCloseable {
    private final long address;
    private final long length;
    private final String what;
    private final AtomicBoolean closed = new AtomicBoolean();

    Mapping(long address, long length, String what) {
        this.address = address;
        this.length = length;
        this.what = what;
    }

    public long address() {
        if (closed.get()) {
            throw new IllegalStateException("mapping of " + what + " is closed");
        }
        return address;
    }

    public long length() {
        return length;
    }

    public String what() {
        return what;
    }

    public boolean isOpen() {
        return !closed.get();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true) && length > 0) {
            if (LibCHolder.LIBC.munmap(address, length) != 0) {
                throw new NativeException("munmap(" + what + ", len=" + length + ")", LibCHolder.errno());
            }
        }
    }

    @Override
    public String toString() {
        return "Mapping[" + what + " @0x" + Long.toHexString(address) + "+" + length + (closed.get() ? " closed" : "") + "]";
    }
}
