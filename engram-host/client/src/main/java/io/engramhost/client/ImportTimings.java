package io.engramhost.client;

import io.engramhost.util.Lap;
import io.engramhost.vmm.AttachTimings;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Where an import spent its time, in nanoseconds; {@link #NOT_MEASURED} (or a null {@link Vmm}) for a
 * step that did not run. From a daemon: loading the native bindings, the handshake (connect to
 * WELCOME), IMPORT to the manifest and its fds, the GPU's context made in the background (and what
 * was left to wait for), then the attach: every memfd mapped (and registered for a GPU view), the
 * cuda-vmm host regions ({@code vmm}) and device regions ({@code device}) imported, mapped and given
 * access. From disk ({@link ImportedTables.Source#DISK}) only the load and the total.
 *
 * @param nativeInitNanos the first native call of the process (loads the bindings)
 * @param handshakeNanos connect, the daemon's uid, HELLO to WELCOME
 * @param manifestNanos IMPORT to a decoded MANIFEST with its fds
 * @param gpuPrepareNanos the GPU's context and attach rehearsal, in the background (GPU view only)
 * @param gpuPrepareWaitNanos what the import waited for that preparation (GPU view only)
 * @param mapNanos every memfd's mmap, summed
 * @param registerNanos every memfd's cuMemHostRegister, summed (GPU view only)
 * @param vmm the cuda-vmm HOST_NUMA regions' import, or null without any
 * @param device the cuda-vmm device regions' import, or null without any
 * @param attachNanos the whole attach (seal checks, maps, registrations, imports)
 * @param diskLoadNanos the load from disk (disk loads only)
 * @param totalNanos the whole import
 */
public record ImportTimings(long nativeInitNanos, long handshakeNanos, long manifestNanos, long gpuPrepareNanos,
        long gpuPrepareWaitNanos, long mapNanos, long registerNanos, Vmm vmm, Vmm device, long attachNanos,
        long diskLoadNanos, long totalNanos) {
    /** A step that did not run: {@link #toMap()} leaves its key out. */
    public static final long NOT_MEASURED = -1;

    /**
     * One {@code VmmImport} of several regions: import, reserve and map, GPU access and CPU access
     * ({@link #NOT_MEASURED} without a CPU view), in nanoseconds.
     */
    public record Vmm(long importNanos, long mapNanos, long gpuAccessNanos, long cpuAccessNanos) {
        static Vmm of(AttachTimings t, boolean cpuView) {
            return new Vmm(t.importNanos(), t.reserveMapNanos(), t.gpuAccessNanos(),
                    cpuView ? t.cpuAccessNanos() : NOT_MEASURED);
        }

        void putMillis(Map<String, Double> m, String label) {
            ImportTimings.putMillis(m, label + "_import_ms", importNanos);
            ImportTimings.putMillis(m, label + "_map_ms", mapNanos);
            ImportTimings.putMillis(m, label + "_gpu_access_ms", gpuAccessNanos);
            ImportTimings.putMillis(m, label + "_cpu_access_ms", cpuAccessNanos);
        }
    }

    /** A load from disk that took {@code nanos}. */
    static ImportTimings disk(long nanos) {
        return new ImportTimings(NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED,
                NOT_MEASURED, null, null, NOT_MEASURED, nanos, nanos);
    }

    /**
     * Milliseconds per step that ran, under the keys {@code import --json} reports, in this order:
     * {@code native_init_ms}, {@code handshake_ms}, {@code manifest_ms}, {@code gpu_prepare_ms},
     * {@code gpu_prepare_wait_ms}, {@code map_ms}, {@code register_ms}, {@code vmm_import_ms},
     * {@code vmm_map_ms}, {@code vmm_gpu_access_ms}, {@code vmm_cpu_access_ms}, the same four with
     * {@code device_}, {@code attach_ms}, {@code disk_load_ms}, {@code total_ms}.
     */
    public Map<String, Double> toMap() {
        Map<String, Double> m = new LinkedHashMap<>();
        putMillis(m, "native_init_ms", nativeInitNanos);
        putMillis(m, "handshake_ms", handshakeNanos);
        putMillis(m, "manifest_ms", manifestNanos);
        putMillis(m, "gpu_prepare_ms", gpuPrepareNanos);
        putMillis(m, "gpu_prepare_wait_ms", gpuPrepareWaitNanos);
        putMillis(m, "map_ms", mapNanos);
        putMillis(m, "register_ms", registerNanos);
        if (vmm != null) {
            vmm.putMillis(m, "vmm");
        }
        if (device != null) {
            device.putMillis(m, "device");
        }
        putMillis(m, "attach_ms", attachNanos);
        putMillis(m, "disk_load_ms", diskLoadNanos);
        putMillis(m, "total_ms", totalNanos);
        return Collections.unmodifiableMap(m);
    }

    static void putMillis(Map<String, Double> m, String key, long nanos) {
        if (nanos != NOT_MEASURED) {
            m.put(key, Lap.millis(nanos));
        }
    }
}
