package io.engramhost.bench;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Which benchmark method is ours, which is its baseline, and the target, for every comparison the
 * report makes. Written into each run's metadata, so the report script needs no knowledge of its own.
 * The ratio is always the baseline's time over ours: our speed as a fraction of the baseline's.
 */
public final class Comparisons {
    /** A target: a minimum ratio, or a maximum score at given parameters, or none (ratio reported only). */
    public record Target(String text, Double minRatio, Double maxScore, String unit, Map<String, String> atParams) {
        public static Target ratioAtLeast(double min) {
            return new Target(String.format("ratio >= %.2f", min), min, null, null, Map.of());
        }

        public static Target scoreAtMost(double max, String unit, Map<String, String> atParams) {
            return new Target("< " + max + " " + unit + " at " + atParams, null, max, unit, atParams);
        }

        public static Target none() {
            return new Target("none (ratio reported)", null, null, null, Map.of());
        }
    }

    /** {@code ours} and {@code baseline} are @Benchmark methods of {@code benchmark}, run with the same parameters. */
    public record Comparison(Class<?> benchmark, String ours, String baseline, Target target) {
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
            if (target.maxScore() != null) {
                t.put("max_score", target.maxScore());
                t.put("unit", target.unit());
                t.put("at_params", new LinkedHashMap<>(target.atParams()));
            }
            m.put("target", t);
            return m;
        }
    }

    public static final List<Comparison> ALL = List.of(
            new Comparison(HandshakeBench.class, "clientConnect", "socketpairFds",
                    Target.scoreAtMost(2000, "us/op", Map.of("tables", "64"))),
            new Comparison(HandshakeBench.class, "clientConnect", "socketpairFdsMap", Target.none()),
            new Comparison(HandshakeBench.class, "clientConnectClose", "socketpairFds", Target.none()),
            new Comparison(GatherBench.class, "tableViewReadRows", "unsafeCopy", Target.ratioAtLeast(0.9)),
            new Comparison(GatherBench.class, "tableViewCopy", "unsafeCopy", Target.ratioAtLeast(0.9)),
            new Comparison(GatherBench.class, "chronicleRead", "unsafeCopy", Target.ratioAtLeast(0.9)),
            new Comparison(ColdLoadBench.class, "loaderIntoMemfd", "preadIntoAnonymous", Target.ratioAtLeast(0.9)),
            new Comparison(ColdLoadBench.class, "preadIntoMemfd", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdLoadBench.class, "loaderIntoPopulatedMemfd", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdLoadBench.class, "pwriteIntoMemfd", "preadIntoAnonymous", Target.none()),
            new Comparison(ColdLoadBench.class, "memfdAllocateSeal", "anonymousAllocate", Target.none()),
            new Comparison(AttachBench.class, "vmmGpu", "memfdRegister", Target.none()),
            new Comparison(AttachBench.class, "vmmGpuCpu", "memfdRegister", Target.none()),
            new Comparison(AttachBench.class, "memfdHugetlbRegister", "memfdRegister", Target.none()),
            new Comparison(AttachBench.class, "vmmGpuCpu", "memfdCpuViewPopulated", Target.none()));

    private Comparisons() {
    }

    static List<Map<String, Object>> toJson() {
        return ALL.stream().map(Comparison::toJson).toList();
    }
}
