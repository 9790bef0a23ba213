package io.engramhost.seed;

import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A peer of one seed as the requester knows it: where it is, the tables of its MANIFEST that this daemon wants (by
 * name, with the index its RANGE requests name), the connection its MANIFEST came on until a stream takes it, whether
 * it has been dropped, and the verified bytes it gave with the first and last moment it gave them.
 */
final class SeedPeer {
    final InetSocketAddress address;
    final String name;
    final Map<String, Integer> index = new HashMap<>();
    final Map<String, SeedWire.Table> tables = new HashMap<>();
    /** The connection the MANIFEST came on: the first stream of its first round takes it, the seed closes it else. */
    PeerConnection first;
    volatile boolean dead;
    final AtomicLong bytes = new AtomicLong();
    final AtomicLong firstNanos = new AtomicLong();
    final AtomicLong lastNanos = new AtomicLong();

    SeedPeer(InetSocketAddress address) {
        this.address = address;
        this.name = SeedSettings.show(address);
    }

    /** The verified bytes of its tables, and the seconds from its first byte to its last. */
    Seeder.Source source() {
        return new Seeder.Source(name, bytes.get(), (lastNanos.get() - firstNanos.get()) / 1e9);
    }
}
