package io.engramhost.store;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.seed.SeedSettings;
import io.engramhost.util.Bytes;
import io.engramhost.util.RegionRuns;
import java.util.List;
import java.util.Objects;

/**
 * What one host load is given, checked once here, where it enters ({@link HostCatalogBuilder}'s stages take it as it
 * is): the checkpoint's fds and the tables selected from it, their fingerprint and digest records, the backend's
 * region factory and name, the device tensors, the load's threads, its hooks and the peers it may seed from.
 *
 * @param source        the checkpoint's fds, which the builder owns from then on and closes when the build ends
 * @param deviceTensors the tensors kept in GPU memory (null: none)
 * @param seed          the peers the host tables may come from (null: none, every table from the disk)
 */
record LoadSettings(OpenCheckpoint source, List<TensorInfo> tensors, Fingerprint fingerprint, RecordCheck records,
        HostRegionFactory factory, String backend, DeviceTensors deviceTensors, int threads, DaemonHooks hooks,
        SeedSettings seed) {

    LoadSettings {
        Objects.requireNonNull(source, "source");
        Objects.requireNonNull(fingerprint, "fingerprint");
        Objects.requireNonNull(records, "records");
        Objects.requireNonNull(factory, "factory");
        Objects.requireNonNull(backend, "backend");
        Objects.requireNonNull(hooks, "hooks");
        tensors = List.copyOf(tensors);
        if (factory.maxRegion() % ContentDigest.CHUNK != 0) {
            throw new IllegalArgumentException("the largest region must be a multiple of "
                    + Bytes.format(ContentDigest.CHUNK) + ", was " + factory.maxRegion());
        }
        // the runs' regions counted before the plan lists them: a huge (sparse) file's table must not fill the heap;
        // the exact count is checked after (CatalogFactory)
        Limits.checkRegions(RegionRuns.runRegions(tensors.stream().map(TensorInfo::length).toList(),
                factory.maxRegion()));
    }
}
