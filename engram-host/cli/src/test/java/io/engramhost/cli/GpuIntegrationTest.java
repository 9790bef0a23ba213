package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.GpuVerify;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.CudaResources;
import io.engramhost.cuda.GpuChecksum;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.numa.HugePagePool;
import io.engramhost.numa.Topology;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.RegionKind;
import io.engramhost.vmm.VmmSupport;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * End to end on a GPU: a daemon process per backend, with one tensor also placed in GPU memory, and
 * clients (a CLI process and this JVM) that read every table through their GPU views.
 */
@Tag("gpu")
@Timeout(600)
class GpuIntegrationTest {
    private static final String DEVICE_TENSOR = "engram.layers.14.embedding.scale";

    /** The checksum of a tensor's bytes as they are in the checkpoint file. */
    private static long fileChecksum(TensorInfo t) {
        if (t.length() == 0) {
            return 0;
        }
        try (Fd fd = Posix.open(t.file(), Posix.O_RDONLY, 0); Mapping m = Posix.mmapAnonymous(t.length(), "expected")) {
            Posix.preadFully(fd, m.address(), t.length(), t.offset());
            return GpuChecksum.cpu(m.address(), t.length());
        }
    }

    /** Skips unless GPU 0 can hold {@code backend}'s tables: CUDA, VMM support, and 64 free huge pages for hugetlb. */
    static void assumeGpuFor(String backend) {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        List<String> missing = VmmSupport.missingForHostTables(Cuda.device(0));
        assumeTrue(missing.isEmpty(), "GPU 0 lacks " + missing);
        if (backend.equals("memfd-hugetlb")) {
            long free = Topology.read().systemHugePages().getOrDefault(2L << 20, new HugePagePool(2L << 20, 0, 0)).free();
            assumeTrue(free >= 64, "memfd-hugetlb needs 64 free 2 MiB huge pages; " + free + " are free"
                    + " (reserve them with sysctl vm.nr_hugepages=N)");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"memfd", "memfd-hugetlb", "cuda-vmm"})
    void shouldReadTheCheckpointsBytesThroughEveryGpuView(String backend, @TempDir Path dir) throws Exception {
        assumeGpuFor(backend);
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"),
                new CheckpointGenerator.Spec(List.of(1, 14), 50_000, 256, 11));
        Checkpoint cp = Checkpoint.open(List.of(index));
        Path socket = dir.resolve("run/g.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString(),
                "--backend", backend, "--device-tensors", DEVICE_TENSOR, "--gpus", "0").awaitReady()) {
            CliRun cli = CliRun.of("import", "--socket", socket.toString(), "--gpu", "--device", "0", "--verify", "--json");
            assertEquals(0, cli.exit(), cli.err());
            assertEquals(cp.tensors().size(), CliIntegrationTest.importedTables(cli.out()).size());
            for (Map<String, Object> row : CliIntegrationTest.importedTables(cli.out()).values()) {
                assertEquals(true, ((Map<?, ?>) row.get("gpu_verify")).get("verified"), row.toString());
            }

            int resourcesBefore = CudaResources.live();
            int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
            for (int round = 1; round <= 2; round++) {
                try (ImportedTables tables = EngramClient.connect(socket, Expectation.any(),
                        ClientOptions.defaults().withGpu(0, false));
                        GpuKernels kernels = GpuKernels.load(0)) {
                    for (TensorInfo t : cp.tensors()) {
                        TableView v = tables.table(t.name());
                        assertTrue(v.devicePointer() != 0, t.name() + " has a GPU view");
                        assertEquals(fileChecksum(t), kernels.checksum(v.devicePointer(), t.length()),
                                "round " + round + ": GPU read the checkpoint's bytes of " + t.name());
                        if (t.name().equals(DEVICE_TENSOR)) {
                            assertEquals(RegionKind.VMM_DEVICE, v.entry().kind());
                            assertEquals(0, v.entry().device());
                        } else {
                            assertEquals(backend, v.entry().kind().backend(), t.name());
                        }
                        assertEquals(true, GpuVerify.verify(v, kernels).get("verified"));
                    }
                }
                assertEquals(resourcesBefore, CudaResources.live(), "closing released every CUDA resource");
                assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "and every fd");
            }
            CliRun stop = CliRun.of("stop", "--socket", socket.toString());
            assertEquals(0, stop.exit(), stop.err());
            assertTrue(d.process.waitFor(30, TimeUnit.SECONDS), "daemon stopped after its clients detached");
            assertEquals(0, d.process.exitValue(), d.log());
        }
    }
}
