package io.engramhost.store;

import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.numa.Numa;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.os.Fd;
import io.engramhost.protocol.RegionKind;
import io.engramhost.vmm.HostNumaAllocation;

/** Makes the host regions of one backend (public for the benchmarks' hand-built catalogs). */
public interface HostRegionFactory {
    RegionKind kind();

    /** Region sizes are multiples of this. */
    long granule();

    /** The NUMA node the regions are placed on, when known without looking (-1 otherwise). */
    int node();

    /** The node whose CPUs should fill the regions: the bound one, or the preferred one (-1: none). */
    default int loadNode() {
        return node();
    }

    HostRegion create(int index, long size);

    /** memfds of {@code pages}, with {@code policy} set on each before its first touch. */
    static HostRegionFactory memfd(PageKind pages, NumaPolicy policy) {
        return new HostRegionFactory() {
            @Override
            public RegionKind kind() {
                return pages.hugetlb() ? RegionKind.MEMFD_HUGETLB : RegionKind.MEMFD;
            }

            @Override
            public long granule() {
                return pages.pageSize();
            }

            @Override
            public int node() {
                return policy instanceof NumaPolicy.Bind b ? b.node() : -1;
            }

            @Override
            public int loadNode() {
                return policy instanceof NumaPolicy.OneNode one ? one.node() : -1;
            }

            @Override
            public HostRegion create(int index, long size) {
                MemfdRegion r = MemfdRegion.create("engram." + index, size, pages,
                        policy == NumaPolicy.none() ? null : m -> Numa.apply(m, policy));
                return new HostRegion() {
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

    /** cuMemCreate HOST_NUMA allocations on {@code node}, made in GPU {@code device}'s context, exported once. */
    static HostRegionFactory vmm(int node, int device) {
        return new HostRegionFactory() {
            @Override
            public RegionKind kind() {
                return RegionKind.VMM_HOST;
            }

            @Override
            public long granule() {
                return 2L << 20;
            }

            @Override
            public int node() {
                return node;
            }

            @Override
            public HostRegion create(int index, long size) {
                HostNumaAllocation a = HostNumaAllocation.create(size, node, "engram." + index, device);
                Fd fd;
                try {
                    fd = a.exportFd();
                } catch (RuntimeException e) {
                    a.close();
                    throw e;
                }
                return new HostRegion() {
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
                        // A VMM allocation has no seal: clients choose read-only access (documented).
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
