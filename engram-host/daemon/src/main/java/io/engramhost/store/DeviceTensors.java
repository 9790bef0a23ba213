package io.engramhost.store;

import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.hooks.DaemonHooks;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.util.Closer;
import io.engramhost.vmm.DeviceAllocation;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * GPU-resident tensors served beside the host tables: read once from the checkpoint into a host
 * staging buffer, copied into a {@code cuMemCreate} device allocation on each listed GPU, and
 * exported as POSIX fds. A client on GPU d is sent d's copies.
 */
final class DeviceTensors {
    private final List<TensorInfo> tensors;
    private final List<Integer> gpus;
    private final RecordCheck records;

    DeviceTensors(List<TensorInfo> tensors, List<Integer> gpus, RecordCheck records) {
        this.tensors = List.copyOf(tensors);
        this.gpus = List.copyOf(gpus);
        this.records = records;
    }

    List<TensorInfo> tensors() {
        return tensors;
    }

    private RegionPlan plan() {
        return RegionPlan.plan(tensors.stream().map(TensorInfo::length).toList(),
                HostCatalogBuilder.OWN_REGION_BYTES, HostCatalogBuilder.PACK_LIMIT_BYTES, 256, 2L << 20);
    }

    /** The device regions (fds) one GPU's manifest carries. */
    int regionCount() {
        return plan().regionSizes().size();
    }

    /** Reads the tensors through {@code source}'s validated fds, then copies them into each GPU. */
    void load(OpenCheckpoint source, ManifestAssembler manifests, Closer<AutoCloseable> owned, LoadProgress progress,
            int threads, DaemonHooks hooks) {
        RegionPlan plan = plan();
        long total = tensors.stream().mapToLong(TensorInfo::length).sum();
        progress.phase(LoadProgress.DEVICE, "loading " + tensors.size() + " device tensors for GPUs " + gpus, total);
        List<Mapping> staging = new ArrayList<>();
        try {
            for (long size : plan.regionSizes()) {
                staging.add(Posix.mmapAnonymous(size, "device tensor staging"));
            }
            Map<TensorInfo, Long> address = new LinkedHashMap<>();
            for (int i = 0; i < tensors.size(); i++) {
                RegionPlan.Slot s = plan.slots().get(i);
                address.put(tensors.get(i), s.region() < 0 ? 0L : staging.get(s.region()).address() + s.offset());
            }
            CheckpointLoader.Result read = DiskFill.loader(threads, progress, hooks).load(source, tensors, address::get);
            for (TensorInfo t : tensors) {
                records.check(t, read.digest(t));
            }
            for (int gpu : gpus) {
                for (int r = 0; r < staging.size(); r++) {
                    DeviceAllocation a = owned.add(DeviceAllocation.create(staging.get(r).length(), gpu,
                            "engram.gpu" + gpu + "." + r));
                    a.copyFromHost(staging.get(r).address(), 0, staging.get(r).length());
                    Fd fd = owned.add(a.exportFd());
                    manifests.deviceRegion(gpu, new Manifest.Region(RegionKind.VMM_DEVICE, a.size(), -1, gpu), fd);
                }
                for (int i = 0; i < tensors.size(); i++) {
                    TensorInfo t = tensors.get(i);
                    RegionPlan.Slot s = plan.slots().get(i);
                    manifests.deviceTable(gpu, new Manifest.Table(t.name(), t.dtype().name(), t.shape(), t.length(),
                            s.region(), s.offset(), read.digest(t), RegionKind.VMM_DEVICE, -1, gpu));
                }
            }
            progress.report(r -> r.withDeviceTensors(new LoadReport.DeviceTensorsFact(tensors.size(), total, gpus)));
        } finally {
            staging.forEach(Mapping::close);
        }
    }
}
