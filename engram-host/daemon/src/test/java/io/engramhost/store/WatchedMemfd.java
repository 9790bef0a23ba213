package io.engramhost.store;

import io.engramhost.memfd.PageKind;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.os.Fd;
import io.engramhost.protocol.RegionKind;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntConsumer;

/**
 * The tests' region factory: 4 KiB memfds, {@code beforeCreate} called with each index first (to hold a creation
 * until the load has got somewhere), the indexes in creation order, and the regions still open counted.
 */
class WatchedMemfd implements HostRegionFactory {
    final HostRegionFactory memfd = HostRegionFactory.memfd(PageKind.SMALL, NumaPolicy.none());
    final IntConsumer beforeCreate;
    final AtomicInteger open = new AtomicInteger();
    final List<Integer> created = Collections.synchronizedList(new ArrayList<>());

    WatchedMemfd(IntConsumer beforeCreate) {
        this.beforeCreate = beforeCreate;
    }

    @Override
    public RegionKind kind() {
        return memfd.kind();
    }

    @Override
    public long granule() {
        return memfd.granule();
    }

    @Override
    public int node() {
        return memfd.node();
    }

    @Override
    public HostRegion create(int index, long size) {
        return counted(made(index, size), 0, null);
    }

    /** A memfd of {@code size} for region {@code index}, once {@code beforeCreate} has returned; counted open. */
    HostRegion made(int index, long size) {
        beforeCreate.accept(index);
        HostRegion r = memfd.create(index, size);
        open.incrementAndGet();
        created.add(index);
        return r;
    }

    /** {@code r} at {@code at} (0: its own address), {@code beforeSeal} run first at its seal, uncounted once closed. */
    HostRegion counted(HostRegion r, long at, Runnable beforeSeal) {
        return new HostRegion() {
            private boolean closed;

            @Override
            public long address() {
                return at != 0 ? at : r.address();
            }

            @Override
            public long size() {
                return r.size();
            }

            @Override
            public Fd fd() {
                return r.fd();
            }

            @Override
            public void seal() {
                if (beforeSeal != null) {
                    beforeSeal.run();
                }
                r.seal();
            }

            @Override
            public void close() {
                r.close();
                if (!closed) {
                    closed = true;
                    open.decrementAndGet();
                }
            }
        };
    }
}
