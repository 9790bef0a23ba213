package io.engramhost.vmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.GpuChecksum;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.testing.ChildJvm;
import io.engramhost.testing.GpuTest;
import io.engramhost.testing.NoLeaks;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Daemon here, engine in a separate JVM: HOST_NUMA and device allocations are created and filled
 * here, their fds sent over a Unix socket, and the child's GPU (and CPU view) checksums must equal
 * the CPU checksums of the bytes written.
 */
@GpuTest
@Timeout(180)
@NoLeaks
class VmmImportProcessTest {
    private static final long HOST0 = 64L << 20;
    private static final long HOST1 = (30L << 20) + 4096;
    private static final long DEVICE = 32L << 20;

    @TempDir
    Path dir;

    @Test
    void shouldAttachInAnotherProcessAndReadTheSameBytes() throws IOException, InterruptedException {
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        assumeTrue(VmmSupport.missingForHostTables(Cuda.device(0)).isEmpty(),
                "GPU 0 lacks " + VmmSupport.missingForHostTables(Cuda.device(0)));
        int node = Math.max(0, Cuda.device(0).hostNumaId());
        Map<String, String> reply;
        long[] expected = new long[3];
        try (HostNumaAllocation h0 = HostNumaAllocation.create(HOST0, node, "t0");
                HostNumaAllocation h1 = HostNumaAllocation.create(HOST1, node, "t1");
                DeviceAllocation d0 = DeviceAllocation.create(DEVICE, 0, "d0")) {
            expected[0] = fillFromFile(h0.hostAddress(), h0.size(), 1);
            expected[1] = fillFromFile(h1.hostAddress(), h1.size(), 2);
            try (Mapping staging = Posix.mmapAnonymous(d0.size(), "staging")) {
                TestMemory.fill(staging.address(), d0.size(), 3);
                d0.copyFromHost(staging.address(), 0, d0.size());
                expected[2] = GpuChecksum.cpu(staging.address(), d0.size());
            }
            reply = exchange(List.of(h0.exportFd(), h1.exportFd(), d0.exportFd()),
                    "host=" + h0.size() + "," + h1.size() + "\ndevice=" + d0.size());
        }
        assertNull(reply.get("error"), () -> "child failed: " + reply);
        assertEquals(Long.toString(expected[0]), reply.get("host0.gpu"), "GPU checksum of t0 through the child's view");
        assertEquals(Long.toString(expected[0]), reply.get("host0.cpu"), "CPU checksum of t0 through the child's view");
        assertEquals(Long.toString(expected[1]), reply.get("host1.gpu"));
        assertEquals(Long.toString(expected[1]), reply.get("host1.cpu"));
        assertEquals(Long.toString(expected[0]), reply.get("host0.gpuAgain"), "a second attach after close works");
        assertEquals(Long.toString(expected[1]), reply.get("host1.gpuAgain"));
        assertEquals(Long.toString(expected[2]), reply.get("device0.gpu"), "device allocation through the child's view");
        assertEquals("GPU 0", reply.get("device0.location"));
        assertEquals("true", reply.get("oneRange"), "both host tables sit in one VA range, back to back");
        assertEquals("0", reply.get("cudaLive"), "the child released every CUDA resource");
        assertEquals("0", reply.get("fdsOpen"), "the child closed every fd");
        assertNotNull(reply.get("timings.cpuView"));
        System.out.println("child attach timings, CPU view: " + reply.get("timings.cpuView"));
        System.out.println("child attach timings, GPU only: " + reply.get("timings.gpuOnly"));
    }

    /** Fills via pread from a memfd, as the daemon fills from a checkpoint; returns the checksum. */
    private static long fillFromFile(long address, long size, long seed) {
        try (Fd file = TestMemory.memfd(size, seed)) {
            Posix.preadFully(file, address, size, 0);
            try (Mapping m = Posix.mmap(size, Posix.PROT_READ, Posix.MAP_SHARED, file, 0)) {
                return GpuChecksum.cpu(m.address(), size);
            }
        }
    }

    private Map<String, String> exchange(List<Fd> fds, String sizes) throws IOException, InterruptedException {
        Path log = dir.resolve("child.log");
        Process child = null;
        try (UnixListener listener = UnixListener.bind(dir.resolve("engram.sock"), 1)) {
            child = ChildJvm.start(ImportChild.class, log, listener.path().toString());
            try (UnixConnection c = listener.accept(60_000)) {
                assertNotNull(c, "the child did not connect within 60 s; its log: " + Files.readString(log));
                c.send(ByteBuffer.wrap(sizes.getBytes(StandardCharsets.UTF_8)), fds);
                fds.forEach(Fd::close);
                String text = StandardCharsets.UTF_8.decode(c.receive(1 << 16, 0, 120_000).payload()).toString();
                Map<String, String> m = new HashMap<>();
                for (String line : text.split("\n")) {
                    int eq = line.indexOf('=');
                    if (eq > 0) {
                        m.put(line.substring(0, eq), line.substring(eq + 1));
                    }
                }
                return m;
            }
        } finally {
            fds.forEach(Fd::close);
            if (child != null) {
                if (!child.waitFor(30, TimeUnit.SECONDS)) {
                    child.destroyForcibly();
                }
                System.out.println("child log:\n" + Files.readString(log));
            }
        }
    }
}
