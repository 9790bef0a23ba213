package io.engramhost.client;

/**
 * How a client connects and what views it wants.
 *
 * @param requestTimeoutMillis bound on each answer the daemon owes (welcome, manifest, status)
 * @param notReadyWaitMillis   how long to keep retrying while the daemon is still loading (0: fail at once)
 * @param populate             prefault memfd mappings (MAP_POPULATE) so first reads do not fault
 * @param clientName           a name for the daemon's log
 * @param device               the client's GPU ordinal, -1 for none; the daemon adds that GPU's device tensors
 * @param gpuView              give every table a GPU address on {@code device} (memfd: cuMemHostRegister;
 *                             cuda-vmm: import, map, set access)
 * @param cpuView              give every host table a CPU address (free for memfd; for cuda-vmm a HOST_NUMA
 *                             access grant that costs about 3x the GPU one)
 */
public record ClientOptions(int requestTimeoutMillis, int notReadyWaitMillis, boolean populate, String clientName,
        int device, boolean gpuView, boolean cpuView) {
    public static ClientOptions defaults() {
        return new ClientOptions(10_000, 0, false, "engram-client", -1, false, true);
    }

    public ClientOptions withNotReadyWait(int millis) {
        return new ClientOptions(requestTimeoutMillis, millis, populate, clientName, device, gpuView, cpuView);
    }

    public ClientOptions withPopulate(boolean p) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, p, clientName, device, gpuView, cpuView);
    }

    public ClientOptions withName(String name) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, name, device, gpuView, cpuView);
    }

    /** GPU views on {@code gpu}; a CPU view too only when {@code withCpuView}. */
    public ClientOptions withGpu(int gpu, boolean withCpuView) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, clientName, gpu, true, withCpuView);
    }
}
