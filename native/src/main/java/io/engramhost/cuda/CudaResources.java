package io.engramhost.cuda;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * Counts the CUDA resources of this process that are owned and not yet closed (allocation
 * handles, VA ranges, mappings, host registrations, device buffers, modules): a leak check.
 */
public final class CudaResources {
    private static final AtomicInteger LIVE = new AtomicInteger();

    private CudaResources() {
    }

    /** How many owners are open now. */
    public static int live() {
        return LIVE.get();
    }

    static void opened() {
        LIVE.incrementAndGet();
    }

    static void closed() {
        LIVE.decrementAndGet();
    }
}
