package io.engramhost.store;

import io.engramhost.hooks.DaemonHooks;
import io.engramhost.protocol.Backend;
import io.engramhost.seed.SeedSettings;
import java.nio.file.Path;
import java.util.List;
import java.util.Objects;

/**
 * What the store needs of a daemon's settings to prepare a load ({@link CatalogFactory#prepare}): the
 * checkpoint, the tables, the backend, the placement and the GPUs. The daemon's own settings (socket,
 * uids, timeouts) stay in the daemon, which hands the store one of these.
 *
 * @param device        the GPU a cuda-vmm backend allocates in (null: GPU 0)
 * @param deviceTensors patterns of tensors kept in GPU memory (empty: none)
 * @param gpus          the GPUs that get the device tensors (null: every GPU)
 * @param memoryBudget  {@code serve --memory-budget}: the bytes of ordinary memory the operator says the tables may
 *                      use where the policy puts them, checked instead of MemFree + file cache (null: none)
 * @param hooks         where the load lets its starter step in ({@link DaemonHooks#NONE}: nowhere)
 * @param seed          the peers the host tables may come from ({@code --seed-from}; {@link SeedSettings#NONE}: none)
 * @param regionMax     the largest cuda-vmm host region ({@code --region-max}): a larger table lies in a run of
 *                      regions of this size; 0: one region per table
 */
public record StoreSettings(List<Path> checkpoints, List<String> tables, Backend backend, String numa, Integer device,
        int threads, List<String> deviceTensors, List<Integer> gpus, Long memoryBudget, DaemonHooks hooks, SeedSettings seed,
        long regionMax) {

    public StoreSettings {
        Objects.requireNonNull(backend, "backend");
        Objects.requireNonNull(hooks, "hooks");
        Objects.requireNonNull(seed, "seed");
        checkpoints = List.copyOf(checkpoints);
        tables = List.copyOf(tables);
        deviceTensors = List.copyOf(deviceTensors);
        gpus = gpus == null ? null : List.copyOf(gpus);
    }

    /** Without seeding, as every caller before it. */
    public StoreSettings(List<Path> checkpoints, List<String> tables, Backend backend, String numa, Integer device,
            int threads, List<String> deviceTensors, List<Integer> gpus, Long memoryBudget, DaemonHooks hooks) {
        this(checkpoints, tables, backend, numa, device, threads, deviceTensors, gpus, memoryBudget, hooks,
                SeedSettings.NONE, 0);
    }
}
