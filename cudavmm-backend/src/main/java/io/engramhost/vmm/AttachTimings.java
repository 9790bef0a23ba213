package io.engramhost.vmm;

import java.util.Locale;

/**
 * Where an attach spent its time, in nanoseconds: importing the fds, reserving one VA range and
 * mapping every handle, cuMemSetAccess for the GPU and (0 without a CPU view) for the CPU.
 */
public record AttachTimings(long importNanos, long reserveMapNanos, long gpuAccessNanos, long cpuAccessNanos,
        long bytes, int handles) {
    private static final double GIB = 1L << 30;

    public long totalNanos() {
        return importNanos + reserveMapNanos + gpuAccessNanos + cpuAccessNanos;
    }

    /** Total milliseconds per GiB attached. */
    public double millisPerGiB() {
        return totalNanos() / 1e6 / (bytes / GIB);
    }

    /** One JSON object, as the C baseline prints its lines. */
    public String toJson() {
        return String.format(Locale.ROOT,
                "{\"bytes\":%d,\"handles\":%d,\"import_ms\":%.3f,\"reserve_map_ms\":%.3f,\"gpu_access_ms\":%.3f,"
                        + "\"cpu_access_ms\":%.3f,\"total_ms\":%.3f,\"ms_per_gib\":%.3f}",
                bytes, handles, importNanos / 1e6, reserveMapNanos / 1e6, gpuAccessNanos / 1e6, cpuAccessNanos / 1e6,
                totalNanos() / 1e6, millisPerGiB());
    }
}
