package io.engramhost.bench;

import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * The sets of benchmarks BenchMain runs. {@code smoke} is the CPU set with one fork, short iterations
 * and small parameters (a CI check that everything compiles and runs, not a measurement); GPU
 * benchmarks run only in {@code gpu} and {@code all}.
 */
public enum Suite {
    CPU(Benchmarks.CPU, Benchmarks.GPU),
    SMOKE(Benchmarks.CPU, Benchmarks.GPU),
    GPU(Benchmarks.GPU, List.of()),
    ALL(concat(Benchmarks.CPU, Benchmarks.GPU), List.of());

    /** The benchmark classes, by kind of machine they need. */
    static final class Benchmarks {
        static final List<Class<?>> CPU = List.of(HandshakeBench.class, HandshakePartsBench.class, GatherBench.class,
                ColdLoadBench.class, ColdStartBench.class, BusyDaemonBench.class, DaemonRestartBench.class,
                CliStartBench.class, SeedTransportBench.class);
        static final List<Class<?>> GPU = List.of(AttachBench.class, GpuGatherBench.class, RestartBench.class);

        private Benchmarks() {
        }
    }

    /** Smoke parameters: the smallest of each, applied where the user set none. */
    static final Map<String, String> SMOKE_PARAMS = Map.of("tables", "16", "rowBytes", "264", "tableMiB", "32",
            "threads", "1", "checkpointMiB", "32", "cache", "warm", "streams", "2", "totalMiB", "64", "dest", "buffer");
    static final int SMOKE_ITERATION_MILLIS = 300;

    private final List<Class<?>> included;
    private final List<Class<?>> excluded;

    Suite(List<Class<?>> included, List<Class<?>> excluded) {
        this.included = included;
        this.excluded = excluded;
    }

    private static List<Class<?>> concat(List<Class<?>> a, List<Class<?>> b) {
        return Stream.concat(a.stream(), b.stream()).toList();
    }

    public static Suite of(String name) {
        for (Suite s : values()) {
            if (s.name().equalsIgnoreCase(name)) {
                return s;
            }
        }
        throw new IllegalArgumentException("--suite: '" + name + "' is not one of cpu, smoke, gpu, all");
    }

    public String lowerName() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** Regexps (JMH includes) matching every benchmark of these classes. */
    List<String> includes() {
        return included.stream().map(Suite::regexp).toList();
    }

    List<String> excludes() {
        return excluded.stream().map(Suite::regexp).toList();
    }

    static String regexp(Class<?> benchmark) {
        return "^" + Pattern.quote(benchmark.getName() + ".");
    }
}
