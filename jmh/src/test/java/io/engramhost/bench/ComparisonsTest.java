package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.runner.BenchmarkList;
import org.openjdk.jmh.runner.BenchmarkListEntry;

class ComparisonsTest {
    /**
     * Benchmark classes written on a branch that may not edit Suite.java, waiting for it to list them: each must
     * be in no suite yet. Delete its entry when it joins Suite.Benchmarks (this test then says so).
     */
    private static Set<String> benchmarkMethods(Class<?> c) {
        return Arrays.stream(c.getMethods()).filter(m -> m.isAnnotationPresent(Benchmark.class))
                .map(m -> m.getName()).collect(Collectors.toSet());
    }

    @Test
    void shouldNameExistingBenchmarkMethodsOfOneClass() {
        for (Comparisons.Comparison c : Comparisons.ALL) {
            Set<String> methods = benchmarkMethods(c.benchmark());
            assertTrue(methods.contains(c.ours()), c.benchmark().getSimpleName() + " has no @Benchmark " + c.ours());
            assertTrue(methods.contains(c.baseline()), c.benchmark().getSimpleName() + " has no @Benchmark " + c.baseline());
            assertFalse(c.ours().equals(c.baseline()));
            assertNotNull(c.target().text());
        }
    }

    @Test
    void shouldPutEveryGeneratedBenchmarkInExactlyOneMachineKind() {
        List<BenchmarkListEntry> all = List.copyOf(BenchmarkList.defaultList().getAll(null, List.of()));
        assertFalse(all.isEmpty(), "META-INF/BenchmarkList was generated");
        for (BenchmarkListEntry e : all) {
            long cpu = Suite.CPU.includes().stream().filter(r -> Pattern.compile(r).matcher(e.getUsername()).find()).count();
            long gpu = Suite.GPU.includes().stream().filter(r -> Pattern.compile(r).matcher(e.getUsername()).find()).count();
            assertEquals(1, cpu + gpu, e.getUsername() + " belongs to exactly one of the cpu and gpu suites");
        }
    }

    @Test
    void shouldWriteTargetsForTheReport() {
        List<java.util.Map<String, Object>> json = Comparisons.toJson();
        assertEquals(Comparisons.ALL.size(), json.size());
        java.util.Map<String, Object> handshake = json.get(0);
        assertEquals("io.engramhost.bench.HandshakeBench.clientConnect", handshake.get("ours"));
        @SuppressWarnings("unchecked")
        java.util.Map<String, Object> target = (java.util.Map<String, Object>) handshake.get("target");
        assertEquals(2000.0, target.get("max_score"));
        assertEquals(java.util.Map.of("tables", "64"), target.get("at_params"));
    }

    @Test
    void shouldJudgeEveryGpuViewAgainstEachEnginePinnedCopyInOneGroup() {
        List<Comparisons.Comparison> grouped = Comparisons.ALL.stream()
                .filter(c -> Comparisons.ENGINE_PINNED.equals(c.group())).toList();
        Set<String> pairs = grouped.stream().map(c -> c.ours() + " vs " + c.baseline()).collect(Collectors.toSet());
        for (String view : List.of("gatherVmm", "gatherMemfd", "gatherMemfdHugetlb")) {
            for (String engine : List.of("gatherPinnedAlloc", "gatherPinnedRegister")) {
                assertTrue(pairs.contains(view + " vs " + engine), pairs.toString());
            }
        }
        assertEquals(6, grouped.size());
        for (Comparisons.Comparison c : grouped) {
            assertEquals(GpuGatherBench.class, c.benchmark());
            java.util.Map<String, Object> json = c.toJson();
            assertEquals(Comparisons.ENGINE_PINNED, json.get("group"));
            @SuppressWarnings("unchecked")
            java.util.Map<String, Object> t = (java.util.Map<String, Object>) json.get("target");
            assertEquals(0.98, (Double) t.get("min_ratio"), 1e-12);
            assertFalse(t.containsKey("at_params_in"), "judged at every table and row size");
        }
        assertFalse(Comparisons.ALL.get(0).toJson().containsKey("group"), "no group key where there is none");
    }

    @Test
    void shouldWriteRatioTargetsWithTheirRangeAndParameters() {
        java.util.Map<String, Object> vmm = Comparisons.ALL.stream()
                .filter(c -> c.ours().equals("vmmGpu") && c.baseline().equals("cLibVmmGpu")).findFirst().orElseThrow()
                .toJson();
        @SuppressWarnings("unchecked")
        java.util.Map<String, Object> t = (java.util.Map<String, Object>) vmm.get("target");
        assertEquals(1 / 1.1, (Double) t.get("min_ratio"), 1e-12);
        assertEquals(java.util.Map.of("tableMiB", List.of("16384", "32768", "65536", "102400", "131072", "193536")),
                t.get("at_params_in"));
        assertEquals("ratio >= 0.91 where tableMiB in [16384, 32768, 65536, 102400, 131072, 193536]", t.get("text"));
        Comparisons.Target within = Comparisons.Target.ratioWithin(1.05);
        assertEquals(1 / 1.05, within.minRatio(), 1e-12);
        assertEquals(1.05, within.maxRatio(), 1e-12);
        assertEquals("0.952 <= ratio <= 1.050", within.text());
    }

    @Test
    void shouldJudgeTheFullScaleAttachPerGibAndV41sSizeInUnderTwoSeconds() {
        List<java.util.Map<String, Object>> targets = Comparisons.ALL.stream()
                .filter(c -> c.ours().equals("vmmGpu") && c.baseline().equals("cLibVmmGpu"))
                .map(c -> (java.util.Map<String, Object>) c.toJson().get("target")).toList();
        assertEquals(3, targets.size(), "Java vs C, ms per GiB, 189 GiB in 2 s");
        java.util.Map<String, Object> perGib = targets.stream().filter(t -> t.containsKey("max_ms_per_gib")).findFirst()
                .orElseThrow();
        assertEquals(10.0, perGib.get("max_ms_per_gib"));
        assertEquals(java.util.Map.of("tableMiB", List.of("65536", "102400", "131072", "193536")),
                perGib.get("at_params_in"));
        assertFalse(perGib.containsKey("min_ratio"));
        java.util.Map<String, Object> full = targets.stream().filter(t -> t.containsKey("max_score")).findFirst()
                .orElseThrow();
        assertEquals(2000.0, full.get("max_score"));
        assertEquals("ms/op", full.get("unit"));
        assertEquals(java.util.Map.of("tableMiB", "193536"), full.get("at_params"));
    }
}
