package io.engramhost.bench;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * Which benchmark method is ours, which is its baseline, and the target, for every comparison the
 * report makes. Written into each run's metadata, so the report script needs no knowledge of its own.
 * The ratio is always the baseline's time over ours: our speed as a fraction of the baseline's.
 */
public final class Comparisons {
    /**
     * A target: a minimum ratio, or a maximum score at given parameters, or a maximum of our time per GiB of
     * {@code tableMiB} ({@code maxMsPerGib}), or none (ratio reported only).
     */
    public record Target(String text, Double minRatio, Double maxRatio, Double maxScore, String unit,
            Map<String, String> atParams, Map<String, List<String>> atParamsIn, Double maxMsPerGib) {
        public Target(String text, Double minRatio, Double maxRatio, Double maxScore, String unit,
                Map<String, String> atParams, Map<String, List<String>> atParamsIn) {
            this(text, minRatio, maxRatio, maxScore, unit, atParams, atParamsIn, null);
        }

        public static Target ratioAtLeast(double min) {
            return new Target(String.format("ratio >= %.2f", min), min, null, null, null, Map.of(), Map.of());
        }

        /** Our median, in ms, over the table's size in GiB (parameter {@code tableMiB}) at most {@code max}. */
        public static Target msPerGibAtMost(double max, String... tableMiB) {
            return new Target(String.format("<= %s ms/GiB where tableMiB in %s", max, List.of(tableMiB)), null, null,
                    null, null, Map.of(), Map.of("tableMiB", List.of(tableMiB)), max);
        }

        /** A minimum ratio, judged only where {@code param} has one of {@code values}. */
        public static Target ratioAtLeast(double min, String param, String... values) {
            return new Target(String.format("ratio >= %.2f where %s in %s", min, param, List.of(values)), min, null,
                    null, null, Map.of(), Map.of(param, List.of(values)));
        }

        /** The ratio within {@code [1 / factor, factor]}: the two sides equally fast within that factor. */
        public static Target ratioWithin(double factor) {
            return new Target(String.format("%.3f <= ratio <= %.3f", 1 / factor, factor), 1 / factor, factor, null,
                    null, Map.of(), Map.of());
        }

        public static Target scoreAtMost(double max, String unit, Map<String, String> atParams) {
            return new Target("< " + max + " " + unit + " at " + atParams, null, null, max, unit, atParams, Map.of());
        }

        public static Target none() {
            return new Target("none (ratio reported)", null, null, null, null, Map.of(), Map.of());
        }
    }

    /**
     * {@code ours} and {@code baseline} are @Benchmark methods of {@code benchmark}, run with the same parameters.
     * Comparisons with the same {@code group} (null: none) are also shown together by the report, as one table of
     * ratios per run: a row for each parameter set and ours, a column for each baseline.
     */
    public record Comparison(Class<?> benchmark, String ours, String baseline, Target target, String group) {
        public Comparison(Class<?> benchmark, String ours, String baseline, Target target) {
            this(benchmark, ours, baseline, target, null);
        }

        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("benchmark", benchmark.getName());
            m.put("ours", benchmark.getName() + "." + ours);
            m.put("baseline", benchmark.getName() + "." + baseline);
            Map<String, Object> t = new LinkedHashMap<>();
            t.put("text", target.text());
            if (target.minRatio() != null) {
                t.put("min_ratio", target.minRatio());
            }
            if (target.maxRatio() != null) {
                t.put("max_ratio", target.maxRatio());
            }
            if (!target.atParamsIn().isEmpty()) {
                t.put("at_params_in", new LinkedHashMap<>(target.atParamsIn()));
            }
            if (target.maxMsPerGib() != null) {
                t.put("max_ms_per_gib", target.maxMsPerGib());
            }
            if (target.maxScore() != null) {
                t.put("max_score", target.maxScore());
                t.put("unit", target.unit());
                t.put("at_params", new LinkedHashMap<>(target.atParams()));
            }
            m.put("target", t);
            if (group != null) {
                m.put("group", group);
            }
            return m;
        }
    }

    /** The group of the GPU gather's targets against the engines' own pinned copies (issue 14). */
    static final String ENGINE_PINNED = "GPU gather: our views against an engine's own pinned copy"
            + " (ratio = baseline time / ours = our rows/s over the baseline's; target >= 0.98)";

    /** Our three GPU views against each way an engine pins its own copy: at least 0.98 of its rows/s. */
    private static List<Comparison> gatherAgainstEnginePinned() {
        List<Comparison> out = new ArrayList<>();
        for (String baseline : List.of("gatherPinnedAlloc", "gatherPinnedRegister")) {
            for (String ours : List.of("gatherVmm", "gatherMemfd", "gatherMemfdHugetlb")) {
                out.add(new Comparison(GpuGatherBench.class, ours, baseline, Target.ratioAtLeast(0.98), ENGINE_PINNED));
            }
        }
        out.add(new Comparison(GpuGatherBench.class, "gatherPinnedRegister", "gatherPinnedAlloc", Target.none()));
        out.add(new Comparison(GpuGatherBench.class, "gatherPinnedAlloc", "sequentialPinnedAlloc", Target.none()));
        out.add(new Comparison(GpuGatherBench.class, "gatherPinnedRegister", "sequentialPinnedRegister", Target.none()));
        return out;
    }

    public static final List<Comparison> ALL = Stream.concat(Stream.of(
            new Comparison(HandshakeBench.class, "clientConnect", "socketpairFds",
                    Target.scoreAtMost(2000, "us/op", Map.of("tables", "64"))),
            new Comparison(HandshakeBench.class, "clientConnect", "socketpairFdsMap", Target.none()),
            new Comparison(HandshakeBench.class, "clientConnectClose", "socketpairFds", Target.none()),
            new Comparison(GatherBench.class, "tableViewReadRows", "unsafeCopy", Target.ratioAtLeast(0.9)),
            new Comparison(GatherBench.class, "tableViewCopy", "unsafeCopy", Target.ratioAtLeast(0.9)),
            new Comparison(GatherBench.class, "chronicleRead", "unsafeCopy", Target.ratioAtLeast(0.9)),
            new Comparison(ColdLoadBench.class, "loaderIntoMemfd", "preadIntoAnonymous",
                    Target.ratioAtLeast(0.9, "cache", "warm")),
            new Comparison(ColdLoadBench.class, "preadIntoMemfd", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdStartBench.class, "readIntoRegions", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdStartBench.class, "readIntoRegions", "directRead",
                    Target.ratioAtLeast(0.9, "cache", "cold")),
            new Comparison(ColdStartBench.class, "readIntoRegions", "ddDirect",
                    Target.ratioAtLeast(0.9, "cache", "cold")),
            new Comparison(ColdStartBench.class, "preadIntoAnonymous", "memcpy", Target.none()),
            new Comparison(ColdLoadBench.class, "loaderIntoPopulatedMemfd", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdLoadBench.class, "pwriteIntoMemfd", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdLoadBench.class, "memfdAllocateSeal", "anonymousAllocate", Target.none()),
            new Comparison(AttachBench.class, "vmmGpu", "cLibVmmGpu", Target.ratioAtLeast(1 / 1.1, "tableMiB", "16384",
                    "32768", "65536", "102400", "131072", "193536")),
            // issue 15: at full scale, at most 10 ms per GiB, and V4.1's 189 GiB in under 2 s
            new Comparison(AttachBench.class, "vmmGpu", "cLibVmmGpu", Target.msPerGibAtMost(10, "65536", "102400",
                    "131072", "193536")),
            new Comparison(AttachBench.class, "vmmGpu", "cLibVmmGpu", Target.scoreAtMost(2000, "ms/op",
                    Map.of("tableMiB", "193536"))),
            new Comparison(AttachBench.class, "vmmGpuCpu", "cLibVmmGpuCpu", Target.none()),
            new Comparison(AttachBench.class, "memfdCpuView", "cLibMemfdCpuView", Target.none()),
            new Comparison(AttachBench.class, "memfdRegister", "cLibMemfdRegister", Target.none()),
            new Comparison(AttachBench.class, "memfdHugetlbRegister", "cLibMemfdHugetlbRegister", Target.none()),
            new Comparison(AttachBench.class, "vmmGpu", "memfdRegister", Target.ratioAtLeast(5, "tableMiB", "16384",
                    "32768")),
            new Comparison(AttachBench.class, "vmmGpuCpu", "memfdRegister", Target.none()),
            new Comparison(AttachBench.class, "memfdHugetlbRegister", "memfdRegister", Target.none()),
            new Comparison(AttachBench.class, "vmmGpuCpu", "memfdCpuViewPopulated", Target.none()),
            new Comparison(GpuGatherBench.class, "gatherVmm", "gatherMemfd", Target.ratioWithin(1.05)),
            new Comparison(GpuGatherBench.class, "gatherMemfdHugetlb", "gatherMemfd", Target.none()),
            new Comparison(GpuGatherBench.class, "gatherMemfd", "sequentialMemfd", Target.none()),
            new Comparison(GpuGatherBench.class, "gatherMemfdHugetlb", "sequentialMemfdHugetlb", Target.none()),
            new Comparison(GpuGatherBench.class, "gatherVmm", "sequentialVmm", Target.none()),
            new Comparison(GpuGatherBench.class, "sequentialVmm", "sequentialMemfd", Target.none()),
            // Issue 14: the Java client's whole restart, process start to the tables usable on the GPU, at 40 GiB
            new Comparison(RestartBench.class, "javaClient", "cClient", Target.scoreAtMost(800, "ms/op",
                    Map.of("backend", "cuda-vmm", "tableMiB", "40960", "view", "gpu"))),
            new Comparison(RestartBench.class, "javaClientWithoutAppCds", "cClient", Target.none()),
            new Comparison(RestartBench.class, "javaClient", "javaClientWithoutAppCds", Target.none()),
            new Comparison(RestartBench.class, "pythonAfterTorch", "cClient", Target.ratioAtLeast(1 / 1.2))),
            gatherAgainstEnginePinned().stream()).toList();

    private Comparisons() {
    }

    static List<Map<String, Object>> toJson() {
        return ALL.stream().map(Comparison::toJson).toList();
    }
}
