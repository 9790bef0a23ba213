package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.client.ClientOptions;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A cuda-vmm daemon seeds every table from a cuda-vmm exporter (issue #29: the exporter reads its regions through a
 * CPU view, SeedServer), on loopback: nothing read from the disk, and every table's bytes, read through a CPU view of
 * each daemon's regions, are the checkpoint's. The weights are over 64 MiB, so each is sent as several ranges from
 * its own region, at offsets within the view.
 */
@Tag("gpu")
@Timeout(300)
class SeedGpuTest {
    private static final ClientOptions CPU_VIEW = ClientOptions.defaults().withName("seed-gpu-test").withGpu(0, true);

    @Test
    void shouldSeedACudaVmmDaemonFromACudaVmmExporterByteForByte(@TempDir Path dir) throws Exception {
        GpuIntegrationTest.assumeGpuFor("cuda-vmm");
        Path model = SeedProcessTest.generate(dir, "m", "42", 300_000); // 2 weights of 73 MiB, 2 ranges each
        Path key = SeedProcessTest.keyFile(dir.resolve("key"), 32);
        int pa = SeedProcessTest.freePort();
        try (DaemonProcess a = SeedProcessTest.serve(dir, "a", model, "--backend", "cuda-vmm", "--seed-listen",
                "127.0.0.1:" + pa, "--seed-key", key.toString());
                DaemonProcess b = SeedProcessTest.serve(dir, "b", model, "--backend", "cuda-vmm", "--seed-from",
                        "127.0.0.1:" + pa, "--seed-key", key.toString())) {
            Map<String, Object> o = SeedProcessTest.origin(b);
            assertEquals("seed", o.get("how"), o.toString());
            assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> sources = (List<Map<String, Object>>) ((Map<String, Object>) o.get("seeded"))
                    .get("sources");
            assertEquals(List.of("127.0.0.1:" + pa), sources.stream().map(s -> s.get("peer")).toList());
            assertTrue(b.log().contains("seed: 4 of 4 tables ("), b.log());
            assertTrue(a.log().matches("(?s).*seed: a CPU view of \\d+ cuda-vmm regions to export them from, made in"
                    + " .*"), a.log());
            Map<String, String> fromA = SeedProcessTest.imported(a, model, CPU_VIEW);
            assertEquals(4, fromA.size(), fromA.toString());
            assertEquals(fromA, SeedProcessTest.imported(b, model, CPU_VIEW), "both serve the checkpoint's bytes");
        }
    }

    /**
     * Tables over runs of regions ({@code --region-max 64M}: weights of about 244 MiB, each in four cuda-vmm
     * allocations mapped back to back): A loads them from the disk, B seeds them from A region by region, and a
     * successor takes A over with {@code --verify-digests}; all three serve the checkpoint's bytes, each table one
     * contiguous range in the client's view (docs/protocol.md).
     */
    @Test
    void shouldServeSeedAndHandOverTablesOverRunsOfRegionsByteForByte(@TempDir Path dir) throws Exception {
        GpuIntegrationTest.assumeGpuFor("cuda-vmm");
        Path model = SeedProcessTest.generate(dir, "m", "44", 1_000_000);
        Path key = SeedProcessTest.keyFile(dir.resolve("key"), 32);
        int pa = SeedProcessTest.freePort();
        try (DaemonProcess a = SeedProcessTest.serve(dir, "a", model, "--backend", "cuda-vmm", "--region-max", "64M",
                "--seed-listen", "127.0.0.1:" + pa, "--seed-key", key.toString());
                DaemonProcess b = SeedProcessTest.serve(dir, "b", model, "--backend", "cuda-vmm", "--region-max",
                        "64M", "--seed-from", "127.0.0.1:" + pa, "--seed-key", key.toString())) {
            Map<String, Object> o = SeedProcessTest.origin(b);
            assertEquals("seed", o.get("how"), o.toString());
            assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
            assertTrue(b.log().contains("seed: 4 of 4 tables ("), b.log());
            assertEquals(9L, regions(a), "two weights in four regions each, the scales packed in one");
            assertEquals(9L, regions(b));
            Map<String, String> fromA = SeedProcessTest.imported(a, model, CPU_VIEW);
            assertEquals(4, fromA.size(), fromA.toString());
            assertEquals(fromA, SeedProcessTest.imported(b, model, CPU_VIEW), "both serve the checkpoint's bytes");
            try (DaemonProcess a2 = DaemonProcess.start(a.socket, dir.resolve("a2.log"), "--checkpoint",
                    model.toString(), "--threads", "2", "--backend", "cuda-vmm", "--takeover", "--verify-digests")
                    .awaitReady()) {
                assertEquals(9L, regions(a2));
                assertEquals(fromA, SeedProcessTest.imported(a2, model, CPU_VIEW), "the successor serves them too");
            }
        }
    }

    private static long regions(DaemonProcess d) throws Exception {
        CliRun s = CliRun.of("status", "--socket", d.socket.toString(), "--json");
        assertEquals(0, s.exit(), s.err());
        return ((Number) ContentVerifyTest.json(s.out()).get("regions")).longValue();
    }

    /**
     * The same with {@code --seed-staging}: ranges that arrive while their region is created are held in staging
     * buffers and copied into the cuda-vmm region through the daemon's own mapping of it; what B serves is still the
     * checkpoint's bytes. Larger weights (about 244 MiB each, created at the driver's rate) leave the streams time to
     * stage; how much was staged is in the failure message.
     */
    @Test
    void shouldSeedACudaVmmDaemonWithStagingByteForByte(@TempDir Path dir) throws Exception {
        GpuIntegrationTest.assumeGpuFor("cuda-vmm");
        Path model = SeedProcessTest.generate(dir, "m", "43", 1_000_000);
        Path key = SeedProcessTest.keyFile(dir.resolve("key"), 32);
        int pa = SeedProcessTest.freePort();
        try (DaemonProcess a = SeedProcessTest.serve(dir, "a", model, "--seed-listen", "127.0.0.1:" + pa, "--seed-key",
                key.toString());
                DaemonProcess b = SeedProcessTest.serve(dir, "b", model, "--backend", "cuda-vmm", "--seed-from",
                        "127.0.0.1:" + pa, "--seed-key", key.toString(), "--seed-staging", "2G")) {
            Map<String, Object> o = SeedProcessTest.origin(b);
            assertEquals("seed", o.get("how"), o.toString());
            assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
            assertTrue(b.log().contains("seed: 4 of 4 tables ("), b.log());
            Map<String, String> fromA = SeedProcessTest.imported(a, model, ClientOptions.defaults()
                    .withName("seed-gpu-test"));
            assertEquals(4, fromA.size(), fromA.toString());
            assertEquals(fromA, SeedProcessTest.imported(b, model, CPU_VIEW), "both serve the checkpoint's bytes: "
                    + o);
        }
    }
}
