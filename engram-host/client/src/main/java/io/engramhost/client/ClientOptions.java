package io.engramhost.client;

import java.util.Collection;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Consumer;

/**
 * How a client connects and what views it wants.
 *
 * @param requestTimeoutMillis bound on each answer the daemon owes (welcome, manifest, status)
 * @param notReadyWaitMillis   how long to keep retrying while the daemon is still starting (no socket yet, or
 *                             one nobody listens on yet: tried again every 100 ms), loading (NOT_READY) or
 *                             stopping for a restart (STOPPING: asked again on a new connection, and a socket
 *                             nobody listens on meanwhile tried again); 0: fail at once. {@code connectOrLoad}
 *                             loads from disk at once when no daemon listens, whatever this says
 * @param populate             prefault memfd mappings (MAP_POPULATE) so first reads do not fault
 * @param clientName           a name for the daemon's log
 * @param device               the client's GPU ordinal, -1 for none; the daemon adds that GPU's device tensors
 * @param gpuView              give every table a GPU address on {@code device} (memfd: cuMemHostRegister;
 *                             cuda-vmm: import, map, set access)
 * @param cpuView              give every host table a CPU address (free for memfd; for cuda-vmm a HOST_NUMA
 *                             access grant that costs about 3x the GPU one)
 * @param daemonUids           uids whose daemon this client trusts besides root's and its own effective uid's
 *                             (the CLI's {@code --daemon-uid}); a daemon of any other uid (SO_PEERCRED) is
 *                             refused before a byte is sent to it, since it may be squatting the socket path
 * @param notices              where the client says what it did on its own, in one line (today: that it
 *                             falls back to a disk load because no daemon listens); standard error by default
 * @param futureWriteSeal      whether a memfd sealed FUTURE_WRITE instead of WRITE is accepted (a daemon of a build
 *                             before WRITE); false by default, since FUTURE_WRITE leaves writable a mapping made
 *                             before it (docs/security.md)
 */
public record ClientOptions(int requestTimeoutMillis, int notReadyWaitMillis, boolean populate, String clientName,
        int device, boolean gpuView, boolean cpuView, Set<Integer> daemonUids, Consumer<String> notices,
        boolean futureWriteSeal) {
    public ClientOptions {
        daemonUids = Set.copyOf(daemonUids);
        Objects.requireNonNull(notices, "notices");
    }

    public static ClientOptions defaults() {
        return new ClientOptions(10_000, 0, false, "engram-client", -1, false, true, Set.of(), System.err::println, false);
    }

    public ClientOptions withNotReadyWait(int millis) {
        return new ClientOptions(requestTimeoutMillis, millis, populate, clientName, device, gpuView, cpuView, daemonUids,
                notices, futureWriteSeal);
    }

    public ClientOptions withPopulate(boolean p) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, p, clientName, device, gpuView, cpuView,
                daemonUids, notices, futureWriteSeal);
    }

    public ClientOptions withName(String name) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, name, device, gpuView, cpuView,
                daemonUids, notices, futureWriteSeal);
    }

    /** GPU views on {@code gpu}; a CPU view too only when {@code withCpuView}. */
    public ClientOptions withGpu(int gpu, boolean withCpuView) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, clientName, gpu, true, withCpuView,
                daemonUids, notices, futureWriteSeal);
    }

    /**
     * Also trusts a daemon running as one of {@code uids} (root's and this process's effective uid's
     * daemons always are). Replaces the uids given before.
     */
    public ClientOptions withDaemonUids(Collection<Integer> uids) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, clientName, device, gpuView, cpuView,
                new TreeSet<>(uids), notices, futureWriteSeal);
    }

    /**
     * Also accepts a memfd sealed FUTURE_WRITE rather than WRITE, as daemons of builds before WRITE seal them: only for
     * such a daemon during an upgrade, since FUTURE_WRITE leaves writable any mapping its sender made before it.
     */
    public ClientOptions withFutureWriteSealAccepted(boolean accept) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, clientName, device, gpuView, cpuView,
                daemonUids, notices, accept);
    }

    /** Where the client's own one-line notices go (e.g. a logger instead of standard error). */
    public ClientOptions withNotices(Consumer<String> sink) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, clientName, device, gpuView, cpuView,
                daemonUids, sink, futureWriteSeal);
    }
}
