package io.engramhost.client;

import io.engramhost.os.RawMemory;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.protocol.Manifest;
import java.util.Arrays;
import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.bytes.BytesStore;
import net.openhft.chronicle.bytes.PointerBytesStore;

/**
 * A zero-copy, read-only view of one imported table. Every access checks its bounds and that the
 * handle is still open, so misuse throws instead of crashing the JVM. Row {@code i} of a table is
 * index {@code i} along its first dimension.
 */
public final class TableView {
    /** A class of Chronicle Bytes, which only {@link #openBytes} needs (an optional dependency). */
    private static final String CHRONICLE_BYTES = "net.openhft.chronicle.bytes.BytesStore";

    private final Manifest.Table table;
    private final long hostAddress;
    private final long rowBytes;
    private final long rows;
    private final Guard guard;
    private volatile long devicePointer;

    TableView(Manifest.Table table, long hostAddress, Guard guard) {
        this.table = table;
        this.hostAddress = hostAddress;
        this.guard = guard;
        long[] shape = table.shape();
        this.rows = shape.length == 0 ? 1 : shape[0];
        this.rowBytes = rows == 0 ? 0 : table.bytes() / rows;
    }

    public String name() {
        return table.name();
    }

    /** The safetensors dtype string, e.g. {@code F8_E4M3}. */
    public String dtype() {
        return table.dtype();
    }

    public long[] shape() {
        return table.shape().clone();
    }

    public long bytes() {
        return table.bytes();
    }

    /** Rows along the first dimension (1 for a scalar). */
    public long rows() {
        return rows;
    }

    public long rowBytes() {
        return rowBytes;
    }

    /** The engram digest v1 the daemon computed at load. */
    public long digest() {
        return table.digest();
    }

    public Manifest.Table entry() {
        return table;
    }

    /** True when the bytes can be read by the CPU through this view. */
    public boolean hasCpuView() {
        return hostAddress != 0 || table.bytes() == 0;
    }

    /** The GPU address of the table, 0 when no GPU view was asked for. */
    public long devicePointer() {
        return devicePointer;
    }

    void devicePointer(long p) {
        devicePointer = p;
    }

    private void check(long offset, long length) {
        if (!hasCpuView()) {
            throw new IllegalStateException("table " + name() + " has no CPU view (" + table.kind().backend()
                    + "; import it with a CPU view)");
        }
        if (offset < 0 || length < 0 || offset > table.bytes() - length) {
            throw new IndexOutOfBoundsException("table " + name() + ": bytes [" + offset + ", " + (offset + length)
                    + ") outside [0, " + table.bytes() + ")");
        }
    }

    public byte getByte(long offset) {
        check(offset, 1);
        guard.enter();
        try {
            return RawMemory.getByte(hostAddress + offset);
        } finally {
            guard.exit();
        }
    }

    public long getLong(long offset) {
        check(offset, 8);
        guard.enter();
        try {
            return RawMemory.getLong(hostAddress + offset);
        } finally {
            guard.exit();
        }
    }

    /** Copies {@code length} bytes from {@code offset} into {@code dst[dstOffset...]}. */
    public void copy(long offset, byte[] dst, int dstOffset, int length) {
        check(offset, length);
        if (dstOffset < 0 || dstOffset > dst.length - length) {
            throw new IndexOutOfBoundsException("destination [" + dstOffset + ", +" + length + ") outside byte["
                    + dst.length + "]");
        }
        guard.enter();
        try {
            RawMemory.copy(hostAddress + offset, dst, dstOffset, length);
        } finally {
            guard.exit();
        }
    }

    /** Copies row {@code row} into {@code dst} at {@code dstOffset}. */
    public void readRow(long row, byte[] dst, int dstOffset) {
        if (row < 0 || row >= rows) {
            throw new IndexOutOfBoundsException("table " + name() + ": row " + row + " outside [0, " + rows + ")");
        }
        copy(row * rowBytes, dst, dstOffset, (int) rowBytes);
    }

    /** Gathers the given rows, one after another, into {@code dst}: one liveness check for all. */
    public void readRows(long[] rowIds, byte[] dst) {
        if (!hasCpuView()) {
            check(0, 0);
        }
        int rb = (int) rowBytes;
        if ((long) rowIds.length * rb > dst.length) {
            throw new IndexOutOfBoundsException(rowIds.length + " rows of " + rb + " bytes do not fit in byte["
                    + dst.length + "]");
        }
        for (long r : rowIds) {
            if (r < 0 || r >= rows) {
                throw new IndexOutOfBoundsException("table " + name() + ": row " + r + " outside [0, " + rows + ")");
            }
        }
        guard.enter();
        try {
            for (int i = 0; i < rowIds.length; i++) {
                RawMemory.copy(hostAddress + rowIds[i] * rowBytes, dst, i * rb, rb);
            }
        } finally {
            guard.exit();
        }
    }

    /** SHA-256 of the table's bytes, read through this view. */
    public byte[] sha256() {
        check(0, table.bytes());
        guard.enter();
        try {
            return ContentDigest.sha256(hostAddress, table.bytes());
        } finally {
            guard.exit();
        }
    }

    /** Recomputes the engram digest v1 through this view (compare with {@link #digest()}). */
    public long computeDigest(int threads) {
        check(0, table.bytes());
        guard.enter();
        try {
            return ContentDigest.digestParallel(hostAddress, table.bytes(), threads);
        } finally {
            guard.exit();
        }
    }

    /**
     * A Chronicle Bytes view of the whole table for bulk reads, bounded by the table's length. The
     * memory stays mapped while the view is open, even past the handle's close: close the view.
     *
     * <p>Chronicle Bytes is an optional dependency of engram-client: an engine that calls this declares
     * {@code net.openhft:chronicle-bytes} itself (and gives its JVM the flags Chronicle asks for); nothing else in
     * the client needs it.
     *
     * @throws IllegalStateException when Chronicle Bytes is not on the class path, or the handle is closed
     */
    public ChronicleView openBytes() {
        try {
            Class.forName(CHRONICLE_BYTES, false, TableView.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            throw new IllegalStateException("TableView.openBytes needs Chronicle Bytes, an optional dependency of"
                    + " engram-client: add net.openhft:chronicle-bytes to the engine's dependencies", e);
        }
        check(0, table.bytes());
        guard.enter();
        try {
            return new ChronicleView(this, guard);
        } catch (RuntimeException | Error e) {
            guard.exit(); // no view holds the guard
            throw e;
        }
    }

    long hostAddress() {
        return hostAddress;
    }

    Guard guard() {
        return guard;
    }

    @Override
    public String toString() {
        return "TableView[" + name() + " " + dtype() + Arrays.toString(table.shape()) + "]";
    }

    /** A read-only Chronicle view that keeps the mapping alive until closed. */
    public static final class ChronicleView implements AutoCloseable {
        private final Guard guard;
        private final PointerBytesStore store;
        private final Bytes<Void> bytes;
        private boolean closed;

        ChronicleView(TableView table, Guard guard) {
            this.guard = guard;
            this.store = BytesStore.wrap(table.hostAddress(), Math.max(table.bytes(), 0));
            this.bytes = store.bytesForRead();
        }

        /** Positioned reads on this are checked by Chronicle against the table's length. */
        public Bytes<Void> bytes() {
            if (closed) {
                throw new IllegalStateException("Chronicle view is closed");
            }
            return bytes;
        }

        @Override
        public synchronized void close() {
            if (!closed) {
                closed = true;
                try {
                    bytes.releaseLast();
                } finally {
                    guard.exit();
                }
            }
        }
    }
}
