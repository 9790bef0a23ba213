package io.engramhost.cuda;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The lifecycle every CUDA owner in this package shares: counted in {@link CudaResources} while
 * open; {@link #close()} acts once (a second close does nothing), making the owner's device
 * current and then calling {@link #release()} to free the native resource.
 */
abstract class CudaOwner implements AutoCloseable {
    /** The GPU whose context made the resource and releases it. */
    protected final int device;
    /** Names the resource in messages. */
    protected final String name;
    private final AtomicBoolean closed = new AtomicBoolean();

    CudaOwner(int device, String name) {
        this.device = device;
        this.name = name;
        CudaResources.opened();
    }

    /** Throws {@code "<what> <name> is closed"} once closed; {@code what} is e.g. "mapping of". */
    protected final void checkOpen(String what) {
        if (closed.get()) {
            throw new IllegalStateException(what + " " + name + " is closed");
        }
    }

    public final boolean isOpen() {
        return !closed.get();
    }

    @Override
    public final void close() {
        if (closed.compareAndSet(false, true)) {
            CudaResources.closed();
            Cuda.useDevice(device);
            release();
        }
    }

    /** Frees the native resource, checking the call; runs once, with {@link #device} current. */
    protected abstract void release();
}
