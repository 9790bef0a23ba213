package io.engramhost.store;

import io.engramhost.os.Fd;

/**
 * One region of host memory a daemon fills and serves: a memfd or a HOST_NUMA VMM allocation. Public for the
 * benchmarks, which build catalogs by hand from the same regions.
 */
public interface HostRegion extends AutoCloseable {
    /** Where the daemon writes the region's bytes while loading. */
    long address();

    long size();

    /** The fd sent to clients; owned by the region. */
    Fd fd();

    /** Makes the region read-only for clients (memfd seals); after this {@link #address()} may be gone. */
    void seal();

    @Override
    void close();
}
