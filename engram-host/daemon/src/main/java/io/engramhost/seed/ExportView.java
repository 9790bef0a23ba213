package io.engramhost.seed;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.util.List;

/**
 * What a {@link SeedExporter} serves, as its owner provides it: the owner (the daemon, from its catalog) knows the
 * regions and how to read them; the exporter knows the wire. {@link #ready} is asked at a peer's first request after
 * its handshake; once the tables are ready it gives what makes their {@link Export}, which the exporter runs once, on
 * a thread of its own (a CPU view of tens of GiB of cuda-vmm regions takes about a second), and closes with itself.
 */
@FunctionalInterface
public interface ExportView {
    /** Null while the tables are still loading; then what makes their export. */
    Maker ready();

    /** Makes the export of the ready tables, opening what their ranges are read from; a failure closes what it opened. */
    @FunctionalInterface
    interface Maker {
        Export make() throws IOException;
    }

    /** Where a region's bytes are read from. */
    sealed interface Region permits FileRegion, MemoryRegion {
    }

    /**
     * A memfd of 4 KiB pages, opened read-only: its ranges go out with sendfile(2) (Netty's epoll transport) or the
     * JDK's {@code transferTo}, or under TLS in pieces read from it. Shared by every range; the export's owner closes it.
     */
    record FileRegion(FileChannel channel) implements Region {
    }

    /**
     * Memory the CPU may read at {@code address} for the region's whole size (a read-only mapping of a hugetlb memfd,
     * from which sendfile(2) fails with EINVAL; a CPU view of cuda-vmm regions): its ranges go out as buffers over the
     * memory itself. The export's owner unmaps it.
     */
    record MemoryRegion(long address) implements Region {
    }

    /** One table exported: its name, bytes and engram digest v1, and where it lies: {@code offset} into its region. */
    record Table(String name, long bytes, long digest, Region region, long offset) {
    }

    /**
     * The tables exported (a RANGE names a table by its index here), the fingerprint SHA-256 of what they come from
     * (32 bytes), and what holds their regions open, closed once no range can be sent from them any more.
     */
    record Export(byte[] fingerprintSha256, List<Table> tables, AutoCloseable owner) {
        public Export {
            tables = List.copyOf(tables);
            if (fingerprintSha256.length != 32) {
                throw new IllegalArgumentException("a fingerprint SHA-256 has 32 bytes, not " + fingerprintSha256.length);
            }
            fingerprintSha256 = fingerprintSha256.clone();
        }

        @Override
        public byte[] fingerprintSha256() {
            return fingerprintSha256.clone();
        }
    }
}
