package io.engramhost.client;

import io.engramhost.vmm.AttachTimings;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What attaching one region (fd) of a manifest took, in nanoseconds; {@link #NOT_MEASURED} for a step
 * that did not run. A memfd is mapped ({@code mmap}) and, for a GPU view, registered with CUDA; a
 * cuda-vmm fd is imported, mapped into the VA range, given GPU access and, for a CPU view, CPU access.
 * Tables packed in one region share it.
 */
public record RegionTimings(long mmapNanos, long registerNanos, long importNanos, long mapNanos, long gpuAccessNanos,
        long cpuAccessNanos) {
    /** A step that did not run: {@link #toMap()} leaves its key out. */
    public static final long NOT_MEASURED = -1;
    /** A region nothing attached (a disk load, or no such region): every step {@link #NOT_MEASURED}. */
    public static final RegionTimings NONE = new RegionTimings(NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED,
            NOT_MEASURED, NOT_MEASURED);

    /** A memfd: mapped, and registered ({@link #NOT_MEASURED} without a GPU view). */
    static RegionTimings memfd(long mmapNanos, long registerNanos) {
        return new RegionTimings(mmapNanos, registerNanos, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED);
    }

    /** A cuda-vmm fd: one handle's steps of its {@code VmmImport}; the CPU access only with a CPU view. */
    static RegionTimings vmm(AttachTimings handle, boolean cpuView) {
        return new RegionTimings(NOT_MEASURED, NOT_MEASURED, handle.importNanos(), handle.reserveMapNanos(),
                handle.gpuAccessNanos(), cpuView ? handle.cpuAccessNanos() : NOT_MEASURED);
    }

    /**
     * Milliseconds per step that ran, keyed as {@code import --json} reports a table's {@code attach}:
     * {@code mmap_ms}, {@code register_ms} for memfd; {@code import_ms}, {@code map_ms},
     * {@code gpu_access_ms}, {@code cpu_access_ms} for cuda-vmm.
     */
    public Map<String, Double> toMap() {
        Map<String, Double> m = new LinkedHashMap<>();
        ImportTimings.putMillis(m, "mmap_ms", mmapNanos);
        ImportTimings.putMillis(m, "register_ms", registerNanos);
        ImportTimings.putMillis(m, "import_ms", importNanos);
        ImportTimings.putMillis(m, "map_ms", mapNanos);
        ImportTimings.putMillis(m, "gpu_access_ms", gpuAccessNanos);
        ImportTimings.putMillis(m, "cpu_access_ms", cpuAccessNanos);
        return Collections.unmodifiableMap(m);
    }
}
