package io.engramhost.vmm;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.Location;
import io.engramhost.cuda.MemHandle;
import io.engramhost.cuda.VaMapping;
import io.engramhost.cuda.VaRange;
import io.engramhost.os.Fd;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;
import io.engramhost.util.Lap;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Client side: tables received as fds (HOST_NUMA or device allocations), imported and mapped into
 * ONE reserved VA range on the client's GPU, each handle whole at its own offset, with GPU access
 * (read-only unless asked) and, only with {@link Access#cpuView()}, CPU access at the same
 * addresses. The caller keeps the fds and may close them as soon as attach returns.
 * {@link #close()} unmaps every handle, frees the range and releases the handles, once.
 */
public final class VmmImport implements AutoCloseable {
    private final List<MemHandle> handles;
    private final VaRange range;
    private final List<VaMapping> mappings;
    private final int device;
    private final Access access;
    private final AttachTimings timings;
    private final AtomicBoolean closed = new AtomicBoolean();

    private final List<AttachTimings> perHandle;

    private VmmImport(List<MemHandle> handles, VaRange range, List<VaMapping> mappings, int device, Access access,
            AttachTimings timings, List<AttachTimings> perHandle) {
        this.perHandle = perHandle;
        this.handles = handles;
        this.range = range;
        this.mappings = mappings;
        this.device = device;
        this.access = access;
        this.timings = timings;
    }

    /**
     * Readies this process for {@link #attach} on {@code device} without touching any table: retains
     * the GPU's primary context, then runs the whole attach path once on one granule of GPU memory of
     * its own (create, export, import, reserve, map, set access, release: no copy, no host memory), so
     * that every class and code path is loaded. A restarting client runs it in the background while it talks to the
     * daemon; the attach of the real tables is then left with the driver's calls. A GPU that cannot
     * do this only skips the rehearsal: the real attach reports what is missing.
     */
    public static void prepare(int device) {
        Cuda.useDevice(device);
        try {
            MemHandle.granularity(Location.hostNuma(0), true, device, false);
            long g = MemHandle.granularity(Location.device(device), true, device, false);
            try (MemHandle rehearsal = MemHandle.create(g, Location.device(device), true, device, "attach rehearsal");
                    Fd fd = rehearsal.exportFd();
                    VmmImport imported = attach(List.of(fd), List.of(g), device, Access.READ_ONLY)) {
                imported.timings(0);
            }
        } catch (RuntimeException unsupported) {
            // no rehearsal on this GPU; attach() will say why if the tables need what is missing
        }
    }

    /**
     * Imports {@code fds} (allocation sizes in {@code sizes}, as the exporter reported them) on GPU
     * {@code device}.
     *
     * @throws IllegalArgumentException when the lists do not match, a size is not positive, or a
     *     CPU view is asked of a device allocation
     */
    public static VmmImport attach(List<Fd> fds, List<Long> sizes, int device, Access access) {
        validate(fds, sizes);
        Cuda.useDevice(device);
        List<MemHandle> handles = new ArrayList<>();
        List<VaMapping> mappings = new ArrayList<>();
        VaRange range = null;
        try {
            List<HandleSteps> steps = new ArrayList<>();
            Lap phases = Lap.start();
            for (int i = 0; i < fds.size(); i++) {
                HandleSteps one = new HandleSteps();
                steps.add(one);
                Lap lap = Lap.start();
                handles.add(MemHandle.importFd(fds.get(i), sizes.get(i), device, "table part " + i));
                one.importNanos = lap.lap();
            }
            long importNanos = phases.lap();
            long[] offsets = new long[handles.size()];
            long alignment = 0;
            long end = 0;
            for (int i = 0; i < handles.size(); i++) {
                MemHandle h = handles.get(i);
                checkCpuView(h, i, access);
                long g = MemHandle.granularity(h.location(), true, device, false);
                if (h.size() % g != 0) {
                    throw new IllegalArgumentException("fd " + i + ": size " + h.size() + " is not a multiple of the "
                            + Bytes.format(g) + " granularity of " + h.location() + " (is it the allocation's size?)");
                }
                alignment = Math.max(alignment, g);
                offsets[i] = Bytes.roundUp(end, g);
                end = offsets[i] + h.size();
            }
            range = VaRange.reserve(end, alignment, device, "tables of " + handles.size() + " fds");
            for (int i = 0; i < handles.size(); i++) {
                Lap lap = Lap.start();
                mappings.add(VaMapping.map(range, offsets[i], handles.get(i)));
                steps.get(i).mapNanos = lap.lap();
            }
            long reserveMapNanos = phases.lap();
            for (int i = 0; i < mappings.size(); i++) {
                Lap lap = Lap.start();
                mappings.get(i).setAccess(Location.device(device), access.gpuWrite());
                steps.get(i).gpuAccessNanos = lap.lap();
            }
            long gpuAccessNanos = phases.lap();
            long cpuAccessNanos = 0;
            if (access.cpuView()) {
                for (int i = 0; i < mappings.size(); i++) {
                    Lap lap = Lap.start();
                    mappings.get(i).setAccess(handles.get(i).location(), access.gpuWrite());
                    steps.get(i).cpuAccessNanos = lap.lap();
                }
                cpuAccessNanos = phases.lap();
            }
            long bytes = handles.stream().mapToLong(MemHandle::size).sum();
            AttachTimings timings = new AttachTimings(importNanos, reserveMapNanos, gpuAccessNanos, cpuAccessNanos,
                    bytes, handles.size());
            List<AttachTimings> perHandle = new ArrayList<>();
            for (int i = 0; i < handles.size(); i++) {
                perHandle.add(steps.get(i).timings(handles.get(i).size()));
            }
            return new VmmImport(List.copyOf(handles), range, List.copyOf(mappings), device, access, timings,
                    List.copyOf(perHandle));
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, openingOrder(handles, range, mappings));
            throw e;
        }
    }

    /** What one handle's calls took while {@link #attach} runs; 0 for a step not taken (no CPU view). */
    private static final class HandleSteps {
        long importNanos;
        long mapNanos;
        long gpuAccessNanos;
        long cpuAccessNanos;

        AttachTimings timings(long bytes) {
            return new AttachTimings(importNanos, mapNanos, gpuAccessNanos, cpuAccessNanos, bytes, 1);
        }
    }

    private static void validate(List<Fd> fds, List<Long> sizes) {
        if (fds.isEmpty()) {
            throw new IllegalArgumentException("attach: no fds given");
        }
        if (fds.size() != sizes.size()) {
            throw new IllegalArgumentException("attach: " + fds.size() + " fds but " + sizes.size() + " sizes");
        }
        for (int i = 0; i < sizes.size(); i++) {
            if (sizes.get(i) == null || sizes.get(i) <= 0) {
                throw new IllegalArgumentException("attach: size of fd " + i + " must be positive, was " + sizes.get(i));
            }
        }
    }

    private static void checkCpuView(MemHandle h, int i, Access access) {
        if (access.cpuView() && !h.location().isHostNuma()) {
            throw new IllegalArgumentException("attach: fd " + i + " is memory on " + h.location()
                    + ", which has no CPU view; attach it without cpuView");
        }
    }

    /** How many fds were attached. */
    public int count() {
        return mappings.size();
    }

    /** The address of fd {@code i}'s first byte: valid on the GPU and, with a CPU view, on the CPU. */
    public long base(int i) {
        if (closed.get()) {
            throw new IllegalStateException("attached tables are closed");
        }
        return mappings.get(i).address();
    }

    public long size(int i) {
        return handles.get(i).size();
    }

    /** Where fd {@code i}'s memory lives (a host NUMA node or a GPU). */
    public Location location(int i) {
        return handles.get(i).location();
    }

    /** The start of the one reserved range holding every fd. */
    public long rangeBase() {
        return range.base();
    }

    public long rangeSize() {
        return range.size();
    }

    public int device() {
        return device;
    }

    public Access access() {
        return access;
    }

    public AttachTimings timings() {
        return timings;
    }

    /** The steps of fd {@code i} alone: its import, map and access calls (reserve counted in the total only). */
    public AttachTimings timings(int i) {
        return perHandle.get(i);
    }

    public boolean isOpen() {
        return !closed.get();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            Closer.closeAll(openingOrder(handles, range, mappings));
        }
    }

    /** The handles, the range, then the mappings: the order they were made, so the reverse of closing. */
    private static List<AutoCloseable> openingOrder(List<MemHandle> handles, VaRange range, List<VaMapping> mappings) {
        List<AutoCloseable> all = new ArrayList<>(handles);
        all.add(range);
        all.addAll(mappings);
        return all;
    }
}
