package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.GpuVerify;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.PendingTables;
import io.engramhost.client.TableView;
import io.engramhost.cuda.CudaResources;
import io.engramhost.cuda.GpuChecksum;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.ProcessProbe;
import io.engramhost.protocol.Expectation;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link EngramClient#connectInBackground} with a GPU view, per backend, against a daemon process: the context, the
 * registrations or VMM imports are made on the {@code engram-attach} thread while this thread loads its kernels;
 * this thread then reads every table through the device pointers and closes the import, which releases on this
 * thread what the worker made; a close at any moment of the attach leaves no CUDA resource and no fd.
 */
@Tag("gpu")
@Timeout(600)
class BackgroundGpuTest {
    private static long fileChecksum(TensorInfo t) {
        if (t.length() == 0) {
            return 0;
        }
        try (Fd fd = Posix.open(t.file(), Posix.O_RDONLY, 0); Mapping m = Posix.mmapAnonymous(t.length(), "expected")) {
            Posix.preadFully(fd, m.address(), t.length(), t.offset());
            return GpuChecksum.cpu(m.address(), t.length());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"memfd", "memfd-hugetlb", "cuda-vmm"})
    void shouldAttachOnItsThreadForThisThreadsKernels(String backend, @TempDir Path dir) throws Exception {
        GpuIntegrationTest.assumeGpuFor(backend);
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"),
                new CheckpointGenerator.Spec(List.of(1, 14), 200_000, 256, 13));
        Checkpoint cp = Checkpoint.open(List.of(index));
        Path socket = dir.resolve("run/g.sock");
        ClientOptions gpu = ClientOptions.defaults().withGpu(0, false);
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString(),
                "--backend", backend).awaitReady(); GpuKernels kernels = GpuKernels.load(0)) {
            int resourcesBefore = CudaResources.live();
            int fdsBefore = ProcessProbe.countOpenFds();
            PendingTables pending = EngramClient.connectInBackground(socket, Expectation.any(), gpu);
            try (GpuKernels second = GpuKernels.load(0)) { // this thread's own CUDA work meanwhile: a module's load
                assertTrue(second != null);
            }
            ImportedTables tables = pending.await(Duration.ofSeconds(120));
            for (TensorInfo t : cp.tensors()) {
                TableView v = tables.table(t.name());
                assertTrue(v.devicePointer() != 0, t.name() + " has a GPU view");
                assertEquals(fileChecksum(t), kernels.checksum(v.devicePointer(), t.length()),
                        backend + ": this thread's kernel read the checkpoint's bytes of " + t.name());
                assertEquals(true, GpuVerify.verify(v, kernels).get("verified"));
            }
            long attachMillis = Math.max(1, tables.timings().totalNanos() / 1_000_000);
            pending.close();
            assertTrue(tables.isClosed());
            assertEquals(resourcesBefore, CudaResources.live(), "this thread released what the worker made");
            assertEquals(fdsBefore, ProcessProbe.countOpenFds());

            List<String> landed = new ArrayList<>();
            for (double fraction : new double[] {0, 0.1, 0.3, 0.6, 1.5}) {
                PendingTables p = EngramClient.connectInBackground(socket, Expectation.any(), gpu);
                TimeUnit.MICROSECONDS.sleep((long) (attachMillis * 1000 * fraction));
                landed.add(p.isReady() ? "finished" : "attaching");
                p.close();
                assertEquals(resourcesBefore, CudaResources.live(), "closed at " + fraction + ": " + landed);
                assertEquals(fdsBefore, ProcessProbe.countOpenFds(), "closed at " + fraction + ": " + landed);
            }
            System.out.println("GPU-RESULT background " + backend + ": import " + attachMillis + " ms, closes landed "
                    + landed);
        }
    }
}
