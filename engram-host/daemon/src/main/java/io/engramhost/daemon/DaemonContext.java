package io.engramhost.daemon;

import io.engramhost.protocol.Backend;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.store.StoreSettings;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A daemon's settings, validated once in {@link #conclude()}. The CLI only fills one of these.
 *
 * @param socketTemplate the --socket flag (null: ENGRAM_HOST_SOCKET, else the default)
 * @param allowUids      uids admitted besides the daemon's own
 * @param limits         what one peer's connections may cost (docs/protocol.md)
 * @param memoryBudget   --memory-budget in bytes, checked instead of the free memory (null: none; {@link StoreSettings})
 */
public record DaemonContext(List<Path> checkpoints, List<String> tables, Backend backend, String numa,
        String socketTemplate, String instance, Integer device, Set<Integer> allowUids, int threads,
        ConnectionLimits limits, List<String> deviceTensors, List<Integer> gpus, Long memoryBudget) {

    /** Settings without a --memory-budget. */
    public DaemonContext(List<Path> checkpoints, List<String> tables, Backend backend, String numa, String socketTemplate,
            String instance, Integer device, Set<Integer> allowUids, int threads, ConnectionLimits limits,
            List<String> deviceTensors, List<Integer> gpus) {
        this(checkpoints, tables, backend, numa, socketTemplate, instance, device, allowUids, threads, limits,
                deviceTensors, gpus, null);
    }

    /** Settings with the default connection limits, but this request timeout. */
    public DaemonContext(List<Path> checkpoints, List<String> tables, Backend backend, String numa, String socketTemplate,
            String instance, Integer device, Set<Integer> allowUids, int threads, int requestTimeoutMillis,
            List<String> deviceTensors, List<Integer> gpus) {
        this(checkpoints, tables, backend, numa, socketTemplate, instance, device, allowUids, threads,
                ConnectionLimits.defaults().withRequestTimeout(requestTimeoutMillis), deviceTensors, gpus, null);
    }

    public DaemonContext {
        checkpoints = List.copyOf(checkpoints);
        tables = List.copyOf(tables);
        allowUids = Set.copyOf(allowUids);
        deviceTensors = List.copyOf(deviceTensors);
        gpus = gpus == null ? null : List.copyOf(gpus);
    }

    /** Checks every setting and returns this; errors name the flag. */
    public DaemonContext conclude() {
        if (checkpoints.isEmpty()) {
            throw new IllegalArgumentException("--checkpoint: at least one checkpoint path is needed");
        }
        if (backend == null) {
            throw new IllegalArgumentException("--backend: a backend is needed: one of " + String.join(", ", Backend.wireNames()));
        }
        if (threads < 1 || threads > 1024) {
            throw new IllegalArgumentException("--threads: " + threads + " is not between 1 and 1024");
        }
        limits.check();
        for (int uid : allowUids) {
            if (uid < 0) {
                throw new IllegalArgumentException("--allow-uid: " + uid + " is not a uid");
            }
        }
        return this;
    }

    /** What the store needs to prepare the load ({@code CatalogFactory.prepare}). */
    public StoreSettings store() {
        return new StoreSettings(checkpoints, tables, backend, numa, device, threads, deviceTensors, gpus, memoryBudget);
    }

    public Path socketPath(Map<String, String> env, java.util.function.IntFunction<String> uuidOfDevice) {
        return SocketPaths.resolve(SocketPaths.template(socketTemplate, env), instance, device, uuidOfDevice);
    }

    public String instanceName() {
        return instance == null || instance.isBlank() ? SocketPaths.DEFAULT_INSTANCE : instance;
    }

    /** The daemon's own uid, root, and the listed ones. */
    public boolean admits(int uid) {
        return uid == io.engramhost.os.Posix.geteuid() || uid == 0 || allowUids.contains(uid);
    }

    /** Only the daemon's own uid, or root, may stop it. */
    public boolean mayStop(int uid) {
        return uid == io.engramhost.os.Posix.geteuid() || uid == 0;
    }
}
