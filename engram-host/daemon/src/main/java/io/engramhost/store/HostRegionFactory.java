package io.engramhost.store;

import io.engramhost.cuda.VaRange;
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

    /**
     * The largest region this factory makes for a table: a larger table lies in a run of consecutive regions of this
     * size, back to back in one address range of this process ({@link #reserveRun}, {@link #createInRun}) and in a
     * client's (docs/protocol.md). 0: one region per table, whatever its size.
     */
    default long maxRegion() {
        return 0;
    }

    /** Address space for a run of {@code bytes}; the caller owns it and closes it after the run's regions. */
    default Run reserveRun(long bytes, String name) {
        throw new UnsupportedOperationException(kind() + " regions do not make runs");
    }

    /** Region {@code index} of {@code size} bytes, mapped at {@code offset} of {@code run}. */
    default HostRegion createInRun(int index, long size, Run run, long offset) {
        throw new UnsupportedOperationException(kind() + " regions do not make runs");
    }

    /** A reserved address range that the regions of one run are mapped into, one after another. */
    interface Run extends AutoCloseable {
        long address();

        @Override
        void close();
    }

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
        return vmm(node, device, 0);
    }

    /**
     * As {@link #vmm(int, int)}, a table larger than {@code maxRegion} (a multiple of 2 MiB; 0: none is split) made
     * as a run of allocations of that size ({@code serve --region-max}).
     */
    static HostRegionFactory vmm(int node, int device, long maxRegion) {
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
            public long maxRegion() {
                return maxRegion;
            }

            @Override
            public Run reserveRun(long bytes, String name) {
                return new VmmRun(HostNumaAllocation.reserveRun(bytes, node, name, device));
            }

            @Override
            public HostRegion create(int index, long size) {
                return made(HostNumaAllocation.create(size, node, "engram." + index, device));
            }

            @Override
            public HostRegion createInRun(int index, long size, Run run, long offset) {
                if (!(run instanceof VmmRun r)) {
                    throw new IllegalArgumentException("a run of another factory");
                }
                return made(HostNumaAllocation.createIn(r.range, offset, size, node, "engram." + index, device));
            }

            private HostRegion made(HostNumaAllocation a) {
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

/** The VA range of a run of cuda-vmm regions; closing it frees the range (after its regions are closed). */
final class VmmRun implements HostRegionFactory.Run {
    final VaRange range;

    VmmRun(VaRange range) {
        this.range = range;
    }

    @Override
    public long address() {
        return range.base();
    }

    @Override
    public void close() {
        range.close();
    }
}
