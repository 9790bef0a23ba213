package io.engramhost.client;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.GpuChecksum;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Checks a table through its GPU view: a kernel (native/cuda/engram_kernels.cu) reads every byte
 * through the device address and its checksum must equal the CPU's over the same bytes; those bytes
 * (read through the CPU view, or copied device-to-host where there is none) must also give the
 * digest the daemon computed at load. So the GPU sees exactly the bytes the daemon loaded.
 */
public final class GpuVerify {
    private GpuVerify() {
    }

    /** The check's figures for one table; throws when the GPU and the CPU disagree. */
    public static Map<String, Object> verify(TableView table, GpuKernels kernels) {
        if (table.devicePointer() == 0 && table.bytes() > 0) {
            throw new IllegalStateException("table " + table.name() + " has no GPU view: import it with --gpu");
        }
        Map<String, Object> out = new LinkedHashMap<>();
        Guard guard = table.guard();
        guard.enter();
        Mapping copy = null;
        try {
            long t0 = System.nanoTime();
            long gpu = table.bytes() == 0 ? 0 : kernels.checksum(table.devicePointer(), table.bytes());
            long t1 = System.nanoTime();
            long cpuBytes = table.hostAddress();
            if (cpuBytes == 0 && table.bytes() > 0) {
                copy = Posix.mmapAnonymous(table.bytes(), "copy of " + table.name());
                Cuda.copyDeviceToHost(kernels.device(), copy.address(), table.devicePointer(), table.bytes());
                cpuBytes = copy.address();
                out.put("cpu_bytes_from", "device-to-host copy");
            } else {
                out.put("cpu_bytes_from", "cpu view");
            }
            long cpu = table.bytes() == 0 ? 0 : GpuChecksum.cpu(cpuBytes, table.bytes());
            long digest = ContentDigest.digestParallel(cpuBytes, table.bytes(), Runtime.getRuntime().availableProcessors());
            out.put("gpu_checksum", String.format("%016x", gpu));
            out.put("cpu_checksum", String.format("%016x", cpu));
            out.put("kernel_ms", (t1 - t0) / 1e6);
            if (gpu != cpu) {
                throw new EngramClientException("table " + table.name() + ": the GPU read checksum "
                        + String.format("%016x", gpu) + " through its view, the CPU " + String.format("%016x", cpu));
            }
            if (digest != table.digest()) {
                throw new EngramClientException("table " + table.name() + ": digest " + String.format("%016x", digest)
                        + " differs from the daemon's " + String.format("%016x", table.digest()));
            }
            out.put("verified", true);
            return out;
        } finally {
            if (copy != null) {
                copy.close();
            }
            guard.exit();
        }
    }
}
