package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.JvmFlags;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.openjdk.jmh.results.format.ResultFormatType;
import org.openjdk.jmh.runner.options.CommandLineOptionException;
import org.openjdk.jmh.runner.options.Options;

class BenchOptionsTest {
    private static final LocalDate DAY = LocalDate.of(2026, 11, 29);

    private static BenchOptions.Parsed parse(String... args) throws CommandLineOptionException {
        return BenchOptions.parse(List.of(args), DAY, "box 1");
    }

    @Test
    void shouldRunTheCpuSuiteIntoADatedDirectoryWithTheProjectFlags() throws Exception {
        BenchOptions.Parsed p = parse();
        assertEquals(Suite.CPU, p.suite());
        assertEquals(Path.of("bench/results/2026-11-29-box_1/cpu.json"), p.resultFile());
        assertEquals(Path.of("bench/results/2026-11-29-box_1/cpu.meta.json"), p.metadataFile());
        Options o = p.jmh();
        assertEquals(ResultFormatType.JSON, o.getResultFormat().get());
        assertEquals(p.resultFile().toString(), o.getResult().get());
        assertTrue(new ArrayList<>(o.getJvmArgsAppend().get()).containsAll(JvmFlags.get()), "every fork gets the flags");
        assertTrue(o.getJvmArgsAppend().get().contains("--add-opens=java.base/java.lang=ALL-UNNAMED"),
                "and Chronicle's, for GatherBench's view");
        assertTrue(o.shouldFailOnError().get());
        assertTrue(o.getIncludes().contains(Suite.regexp(HandshakeBench.class)));
        assertTrue(o.getIncludes().contains(Suite.regexp(ColdLoadBench.class)));
        assertFalse(o.getForkCount().hasValue(), "the full suite keeps each benchmark's own fork count");
    }

    @Test
    void shouldApplySmokePresetsWhereTheUserSetNothing() throws Exception {
        Options o = parse("--suite", "smoke", "-f", "2", "-p", "tables=64").jmh();
        assertEquals(2, o.getForkCount().get(), "the user's -f wins");
        assertEquals(List.of("64"), new ArrayList<>(o.getParameter("tables").get()));
        assertEquals(List.of("264"), new ArrayList<>(o.getParameter("rowBytes").get()));
        assertEquals(1, o.getWarmupIterations().get());
        assertEquals(2, o.getMeasurementIterations().get());
        assertEquals(Suite.SMOKE_ITERATION_MILLIS, o.getMeasurementTime().get().convertTo(java.util.concurrent.TimeUnit.MILLISECONDS));
    }

    @Test
    void shouldKeepGpuBenchmarksOutOfCpuSuites() throws Exception {
        for (String suite : List.of("cpu", "smoke")) {
            Options o = parse("--suite", suite).jmh();
            for (Class<?> gpu : Suite.Benchmarks.GPU) {
                assertTrue(o.getExcludes().contains(Suite.regexp(gpu)), suite + " excludes " + gpu.getSimpleName());
            }
        }
        Options gpu = parse("--suite", "gpu").jmh();
        assertEquals(Suite.Benchmarks.GPU.stream().map(Suite::regexp).toList(), gpu.getIncludes());
        assertFalse(gpu.shouldFailOnError().get(), "one GPU path lacking huge pages must not stop the others");
    }

    @Test
    void shouldLetUserRegexpsReplaceTheSuiteSelection() throws Exception {
        BenchOptions.Parsed p = parse("--out", "/tmp/x", "--name", "gather run", "Gather");
        assertEquals(List.of("Gather"), p.jmh().getIncludes());
        assertEquals(Path.of("/tmp/x/gather_run.json"), p.resultFile());
    }

    @Test
    void shouldRejectBadArgumentsNamingThem() {
        IllegalArgumentException suite = assertThrows(IllegalArgumentException.class, () -> parse("--suite", "fast"));
        assertEquals("--suite: 'fast' is not one of cpu, smoke, gpu, all", suite.getMessage());
        IllegalArgumentException out = assertThrows(IllegalArgumentException.class, () -> parse("--out"));
        assertEquals("--out needs a value", out.getMessage());
        assertThrows(IllegalArgumentException.class, () -> parse("--name", ".."));
        assertThrows(CommandLineOptionException.class, () -> parse("-f", "many"));
    }
}
