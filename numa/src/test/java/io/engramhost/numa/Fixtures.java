package io.engramhost.numa;

import java.net.URISyntaxException;
import java.net.URL;
import java.nio.file.Path;

/** Roots of the sysfs fixtures under src/test/resources/topology. */
final class Fixtures {
    static final String TWO_SOCKET = "two-socket-8gpu";
    static final String SINGLE_NODE_VM = "single-node-gpu-vm";
    static final String CXL = "cxl-memory-node";
    static final String MEMORYLESS = "memoryless-node";
    static final String NO_NUMA = "no-numa-sysfs";
    /** aarch64 with 64 KiB base pages: the default huge page (Hugepagesize) is 512 MiB, 2 MiB pages exist too. */
    static final String GRACE_64K = "grace-64k-pages";

    private Fixtures() {
    }

    static Path root(String name) {
        URL url = Fixtures.class.getResource("/topology/" + name);
        if (url == null) {
            throw new IllegalStateException("no fixture topology/" + name + " on the test classpath");
        }
        try {
            return Path.of(url.toURI());
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The fixture's topology, its {@code proc/zoneinfo} (where it has one) counted in 4 KiB pages, as captured. */
    static Topology topology(String name) {
        return Topology.read(root(name), 4096);
    }
}
