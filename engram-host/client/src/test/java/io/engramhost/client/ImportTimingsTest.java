package io.engramhost.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.vmm.AttachTimings;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The typed timings turn into the maps {@code import --json} has always reported: same keys, order, values. */
class ImportTimingsTest {
    private static final long NM = ImportTimings.NOT_MEASURED;

    @Test
    void shouldReportAMemfdImportWithoutGpuAsBefore() {
        ImportTimings t = new ImportTimings(1_000_000, 2_500_000, 3_000_000, NM, NM, 4_250_000, NM, null, null,
                5_000_000, NM, 16_000_000);
        Map<String, Double> m = t.toMap();
        assertEquals(List.of("native_init_ms", "handshake_ms", "manifest_ms", "map_ms", "attach_ms", "total_ms"),
                List.copyOf(m.keySet()));
        assertEquals(1.0, m.get("native_init_ms"));
        assertEquals(2.5, m.get("handshake_ms"));
        assertEquals(3.0, m.get("manifest_ms"));
        assertEquals(4.25, m.get("map_ms"));
        assertEquals(5.0, m.get("attach_ms"));
        assertEquals(16.0, m.get("total_ms"));
    }

    @Test
    void shouldReportEveryStepOfAGpuImportInTheOrderTheyRan() {
        ImportTimings.Vmm vmm = ImportTimings.Vmm.of(new AttachTimings(1_000, 2_000, 3_000, 4_000, 1L << 21, 2), true);
        ImportTimings.Vmm device = ImportTimings.Vmm.of(new AttachTimings(5_000, 6_000, 7_000, 0, 1L << 21, 1), false);
        ImportTimings t = new ImportTimings(10, 20, 30, 40, 50, 60, 70, vmm, device, 80, NM, 90);
        Map<String, Double> m = t.toMap();
        assertEquals(List.of("native_init_ms", "handshake_ms", "manifest_ms", "gpu_prepare_ms", "gpu_prepare_wait_ms",
                "map_ms", "register_ms", "vmm_import_ms", "vmm_map_ms", "vmm_gpu_access_ms", "vmm_cpu_access_ms",
                "device_import_ms", "device_map_ms", "device_gpu_access_ms", "attach_ms", "total_ms"),
                List.copyOf(m.keySet()));
        assertEquals(40 / 1e6, m.get("gpu_prepare_ms"));
        assertEquals(70 / 1e6, m.get("register_ms"));
        assertEquals(0.001, m.get("vmm_import_ms"));
        assertEquals(0.002, m.get("vmm_map_ms"));
        assertEquals(0.003, m.get("vmm_gpu_access_ms"));
        assertEquals(0.004, m.get("vmm_cpu_access_ms"));
        assertEquals(0.005, m.get("device_import_ms"));
        assertEquals(0.006, m.get("device_map_ms"));
        assertEquals(0.007, m.get("device_gpu_access_ms"));
        assertEquals(90 / 1e6, m.get("total_ms"));
    }

    @Test
    void shouldKeepAZeroStepThatRan() {
        ImportTimings t = new ImportTimings(0, 0, 0, NM, NM, 0, 0, null, null, 0, NM, 0);
        assertEquals(List.of("native_init_ms", "handshake_ms", "manifest_ms", "map_ms", "register_ms", "attach_ms",
                "total_ms"), List.copyOf(t.toMap().keySet()));
        assertTrue(t.toMap().values().stream().allMatch(v -> v == 0.0));
    }

    @Test
    void shouldReportADiskLoadAsTheLoadAndTheTotal() {
        Map<String, Double> m = ImportTimings.disk(1_234_567_890).toMap();
        assertEquals(List.of("disk_load_ms", "total_ms"), List.copyOf(m.keySet()));
        assertEquals(1234.56789, m.get("disk_load_ms"));
        assertEquals(1234.56789, m.get("total_ms"));
    }

    @Test
    void shouldGiveAMapNoOneCanChange() {
        Map<String, Double> m = ImportTimings.disk(1).toMap();
        assertThrows(UnsupportedOperationException.class, () -> m.put("x_ms", 1.0));
    }

    @Test
    void shouldReportAMemfdRegionAsMmapAndRegister() {
        assertEquals(Map.of("mmap_ms", 1.5), RegionTimings.memfd(1_500_000, RegionTimings.NOT_MEASURED).toMap());
        Map<String, Double> m = RegionTimings.memfd(1_500_000, 250_000).toMap();
        assertEquals(List.of("mmap_ms", "register_ms"), List.copyOf(m.keySet()));
        assertEquals(1.5, m.get("mmap_ms"));
        assertEquals(0.25, m.get("register_ms"));
    }

    @Test
    void shouldReportAVmmRegionAsItsHandlesSteps() {
        AttachTimings handle = new AttachTimings(1_000_000, 2_000_000, 3_000_000, 4_000_000, 1L << 21, 1);
        Map<String, Double> cpu = RegionTimings.vmm(handle, true).toMap();
        assertEquals(List.of("import_ms", "map_ms", "gpu_access_ms", "cpu_access_ms"), List.copyOf(cpu.keySet()));
        assertEquals(List.of(1.0, 2.0, 3.0, 4.0), List.copyOf(cpu.values()));
        Map<String, Double> gpuOnly = RegionTimings.vmm(handle, false).toMap();
        assertEquals(List.of("import_ms", "map_ms", "gpu_access_ms"), List.copyOf(gpuOnly.keySet()));
    }

    @Test
    void shouldReportNothingForARegionNothingAttached() {
        assertEquals(Map.of(), RegionTimings.NONE.toMap());
    }
}
