package io.engramhost.bench;

import io.engramhost.daemon.Catalog;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.Numa;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.vmm.HostNumaAllocation;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * A daemon catalog built by hand: {@code count} U8 tables of {@code rows x rowBytes}, each in a region of its
 * own of one {@link Backend} (a memfd, a hugetlb memfd or a cuda-vmm HOST_NUMA allocation), filled with
 * pseudo-random bytes on every core ({@link NativeMemory#fillRandomParallel}), sealed, and served with a real
 * SHA-256 fingerprint check. Table digests are not computed (0): no benchmark client verifies them.
 */
final class BenchTables {
    private BenchTables() {
    }

    /** One region: writable at {@link #address()} until sealed; its fd is what the daemon sends. */
    interface Region extends AutoCloseable {
        long address();

        long size();

        Fd fd();

        void seal();

        @Override
        void close();
    }

    /**
     * The regions of one backend, made as the daemon's {@code store.HostRegionFactory} makes them (that one
     * is package-private in engram-host): memfds with a NUMA policy set before the first touch, or HOST_NUMA
     * allocations made in GPU 0's context and exported once.
     */
    abstract static class Backend {
        final RegionKind kind;
        /** The node the manifest names, -1 when not known. */
        final int node;

        private Backend(RegionKind kind, int node) {
            this.kind = kind;
            this.node = node;
        }

        /** Region sizes are multiples of this. */
        abstract long granule();

        abstract Region create(int index, long size);

        /** memfds of {@code pages}, with {@code policy} (validated by the caller) applied before any page is touched. */
        static Backend memfd(PageKind pages, NumaPolicy policy) {
            int node = policy instanceof NumaPolicy.Bind b ? b.node() : -1;
            return new Backend(pages.hugetlb() ? RegionKind.MEMFD_HUGETLB : RegionKind.MEMFD, node) {
                @Override
                long granule() {
                    return pages.pageSize();
                }

                @Override
                Region create(int index, long size) {
                    MemfdRegion r = MemfdRegion.create("engram.bench." + index, size, pages,
                            policy == NumaPolicy.none() ? null : m -> Numa.apply(m, policy));
                    return new Region() {
                        @Override
                        public long address() {
                            return r.writable().address();
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
                            r.seal();
                        }

                        @Override
                        public void close() {
                            r.close();
                        }
                    };
                }
            };
        }

        /** cuMemCreate HOST_NUMA allocations on {@code node}, in GPU {@code device}'s context, exported once. */
        static Backend cudaVmm(int node, int device) {
            return new Backend(RegionKind.VMM_HOST, node) {
                @Override
                long granule() {
                    return 2L << 20; // the allocation rounds up to the driver's granularity itself
                }

                @Override
                Region create(int index, long size) {
                    HostNumaAllocation a = HostNumaAllocation.create(size, node, "engram.bench." + index, device);
                    Fd fd;
                    try {
                        fd = a.exportFd();
                    } catch (RuntimeException e) {
                        a.close();
                        throw e;
                    }
                    return new Region() {
                        @Override
                        public long address() {
                            return a.hostAddress();
                        }

                        @Override
                        public long size() {
                            return a.size();
                        }

                        @Override
                        public Fd fd() {
                            return fd;
                        }

                        @Override
                        public void seal() {
                            // no seal for a VMM allocation: clients map it read-only
                        }

                        @Override
                        public void close() {
                            try {
                                fd.close();
                            } finally {
                                a.close();
                            }
                        }
                    };
                }
            };
        }
    }

    /** The name of table {@code i}. */
    static String name(int i) {
        return "engram.layers." + i + ".embedding.weight";
    }

    /** The fingerprint this catalog serves (hex), derived from its shape so a client can expect it. */
    static String fingerprintHex(int count, long rows, int rowBytes) {
        try {
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            sha.update(("bench:" + count + "x" + rows + "x" + rowBytes).getBytes(java.nio.charset.StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(sha.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /** Tables in 4 KiB or hugetlb memfds with no NUMA policy. */
    static Catalog build(int count, long rows, int rowBytes, PageKind pages) {
        return build(count, rows, rowBytes, Backend.memfd(pages, NumaPolicy.none()));
    }

    /** Tables in regions of {@code regions}, whose kind and node the manifest names. */
    static Catalog build(int count, long rows, int rowBytes, Backend regions) {
        if (count < 1 || rows < 1 || rowBytes < 8 || rowBytes % 8 != 0) {
            throw new IllegalArgumentException("tables: need count >= 1, rows >= 1 and rowBytes a multiple of 8 >= 8;"
                    + " got " + count + " x " + rows + " x " + rowBytes);
        }
        long bytes = Math.multiplyExact(rows, (long) rowBytes);
        long granule = regions.granule();
        long size = Math.max(1, (bytes + granule - 1) / granule) * granule;
        RegionKind kind = regions.kind;
        List<Region> owned = new ArrayList<>(count);
        try {
            List<Manifest.Region> rs = new ArrayList<>(count);
            List<Manifest.Table> ts = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                Region r = regions.create(i, size);
                owned.add(r);
                NativeMemory.fillRandomParallel(r.address(), r.size(), 0x5eed0000L + i);
                r.seal();
                rs.add(new Manifest.Region(kind, r.size(), regions.node, -1));
                ts.add(new Manifest.Table(name(i), "U8", new long[] {rows, rowBytes}, bytes, i, 0, 0, kind,
                        regions.node, -1));
            }
            String hex = fingerprintHex(count, rows, rowBytes);
            byte[] sha = HexFormat.of().parseHex(hex);
            Manifest manifest = new Manifest(sha, new byte[0], rs, ts);
            List<Fd> fds = owned.stream().map(Region::fd).toList();
            List<Region> all = List.copyOf(owned);
            return new Catalog(manifest, fds, hex, e -> differences(e, sha), kind.backend(), () -> closeAll(all));
        } catch (RuntimeException e) {
            closeAll(owned);
            throw e;
        }
    }

    private static List<String> differences(Expectation e, byte[] sha) {
        return switch (e.kind()) {
            case ANY -> List.of();
            case SHA256 -> Arrays.equals(e.bytes(), sha) ? List.of()
                    : List.of("fingerprint sha256: expected " + HexFormat.of().formatHex(e.bytes()) + ", serving "
                            + HexFormat.of().formatHex(sha));
            case STRUCTURED -> List.of("structured fingerprints are not served by the benchmark catalog");
        };
    }

    private static void closeAll(List<Region> regions) {
        for (int i = regions.size() - 1; i >= 0; i--) {
            regions.get(i).close();
        }
    }
}
