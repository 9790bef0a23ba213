package io.engramhost.bench;

import io.engramhost.cuda.Cuda;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.protocol.RegionKind;
import io.engramhost.vmm.HostNumaAllocation;
import java.util.ArrayList;
import java.util.List;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/** The tables {@link AttachBench} attaches, each created once per trial, and what one attach holds. */
public final class AttachTables {
    private AttachTables() {
    }

    /** Throws, naming the cause, where CUDA cannot be used: the GPU benchmarks skip themselves so. */
    static void requireCuda() {
        requireCuda(AttachBench.class);
    }

    /** {@link #requireCuda()} for {@code benchmark}, which the message names; makes GPU 0 current. */
    static void requireCuda(Class<?> benchmark) {
        if (!Cuda.available()) {
            throw new IllegalStateException(benchmark.getSimpleName() + " needs a CUDA GPU: "
                    + Cuda.unavailabilityCause() + ". Run it on a GPU machine (--suite gpu); the cpu and smoke suites"
                    + " leave it out.");
        }
        Cuda.useDevice(0);
    }

    /** A sealed memfd of {@code mib} MiB, every page allocated, as the daemon serves it (no GPU needed). */
    static MemfdRegion sealedMemfd(long mib, PageKind pages) {
        MemfdRegion region = MemfdRegion.create("engram.bench.attach", pages.roundUp(mib << 20), pages, null);
        try {
            Posix.madvise(region.writable(), 0, region.size(), Posix.MADV_POPULATE_WRITE);
            region.seal();
            return region;
        } catch (RuntimeException e) {
            region.close();
            throw e;
        }
    }

    /** A memfd of 4 KiB pages; needs no GPU (the CPU views run anywhere; the GPU paths' other states check). */
    @State(Scope.Benchmark)
    public static class Memfd4k {
        @Param({"256"})
        public long tableMiB;

        MemfdRegion region;

        @Setup(Level.Trial)
        public void create() {
            region = sealedMemfd(tableMiB, PageKind.SMALL);
        }

        @TearDown(Level.Trial)
        public void free() {
            region.close();
        }
    }

    @State(Scope.Benchmark)
    public static class MemfdHuge {
        @Param({"256"})
        public long tableMiB;

        MemfdRegion region;

        @Setup(Level.Trial)
        public void create() {
            requireCuda(); // only the GPU paths use it
            region = sealedMemfd(tableMiB, PageKind.HUGE_2M);
        }

        @TearDown(Level.Trial)
        public void free() {
            region.close();
        }
    }

    /** A HOST_NUMA allocation on GPU 0's node; a fresh fd is exported before each shot, as the daemon sends one. */
    @State(Scope.Benchmark)
    public static class HostNuma {
        @Param({"256"})
        public long tableMiB;

        private HostNumaAllocation allocation;
        private Fd fd;
        private int node;

        @Setup(Level.Trial)
        public void create() {
            requireCuda();
            node = Math.max(0, Cuda.device(0).hostNumaId());
            allocation = HostNumaAllocation.create(tableMiB << 20, node, "engram.bench.attach");
        }

        @Setup(Level.Invocation)
        public void export() {
            fd = allocation.exportFd();
        }

        /** The client closes its fd once attached: not timed. */
        @TearDown(Level.Invocation)
        public void closeFd() {
            fd.close();
        }

        @TearDown(Level.Trial)
        public void free() {
            allocation.close();
        }

        Fd fd() {
            return fd;
        }

        long size() {
            return allocation.size();
        }

        /** The daemon side's CPU mapping of the allocation (for the checks). */
        long hostAddress() {
            return allocation.hostAddress();
        }

        int node() {
            return node;
        }
    }

    /**
     * The C baseline in this process ({@link CAttach}), loaded once per trial: for a CPU view, no GPU needed. What a
     * shot attached there is released by the C code after the shot, outside the timing.
     */
    @State(Scope.Thread)
    public static class CLib {
        private CAttach lib;
        private boolean attached;

        @Setup(Level.Trial)
        public void load() {
            loaded();
        }

        CAttach loaded() {
            if (lib == null) {
                lib = CAttach.load();
            }
            return lib;
        }

        long attach(RegionKind kind, Fd fd, long size, int node, int flags) {
            long address = lib.attach(kind, fd, size, node, flags);
            attached = true;
            return address;
        }

        @TearDown(Level.Invocation)
        public void release() {
            if (attached) {
                attached = false;
                lib.release();
            }
        }
    }

    /** {@link CLib} for the GPU paths: the C code's CUDA context (GPU 0's primary one) made once per trial, untimed. */
    @State(Scope.Thread)
    public static class CLibGpu extends CLib {
        @Setup(Level.Trial)
        public void context() {
            requireCuda();
            loaded().context(0);
        }
    }

    /**
     * The C client as a separate process ({@link CPeer}), started with its CUDA context once per trial, for
     * {@link AttachBench#cRoundTrip}: the request/answer that the cross-process C baseline used to include.
     */
    @State(Scope.Thread)
    public static class Peer {
        private CPeer peer;

        @Setup(Level.Trial)
        public void start() {
            requireCuda();
            peer = CPeer.start(0);
            peer.context();
        }

        String ping() {
            return peer.ping();
        }

        @TearDown(Level.Trial)
        public void stop() {
            peer.close();
        }
    }

    /** What one shot attached in Java; released in reverse order after the shot. For CPU views: no GPU needed. */
    @State(Scope.Thread)
    public static class Attached {
        private final List<AutoCloseable> held = new ArrayList<>();

        <T extends AutoCloseable> T keep(T resource) {
            held.add(resource);
            return resource;
        }

        @TearDown(Level.Invocation)
        public void release() throws Exception {
            for (int i = held.size() - 1; i >= 0; i--) {
                held.get(i).close();
            }
            held.clear();
        }
    }

    /** {@link Attached} for the GPU paths: throws in its setup, naming the cause, where CUDA cannot be used. */
    @State(Scope.Thread)
    public static class AttachedGpu extends Attached {
        @Setup(Level.Trial)
        public void check() {
            requireCuda();
        }
    }
}
