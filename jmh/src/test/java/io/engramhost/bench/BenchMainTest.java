package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.json.JsonReader;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** One real JMH run (one forked JVM, one short iteration) through BenchMain. */
@Timeout(120)
class BenchMainTest {
    @Test
    void shouldWriteJsonResultsAndMetadataFromAForkedRun(@TempDir Path dir) throws Exception {
        int rc = BenchMain.run(List.of("--suite", "smoke", "--out", dir.toString(), "--name", "one",
                "HandshakePartsBench.pidfdOpenClose", "-wi", "0", "-i", "1", "-r", "200ms"), System.out, System.err);
        assertEquals(0, rc);
        List<?> results = (List<?>) JsonReader.parse(Files.readString(dir.resolve("one.json")));
        assertEquals(1, results.size());
        Map<?, ?> r = (Map<?, ?>) results.get(0);
        assertEquals("io.engramhost.bench.HandshakePartsBench.pidfdOpenClose", r.get("benchmark"));
        assertTrue(String.valueOf(r.get("jvmArgs")).contains("-Dchronicle.analytics.disable=true"), "fork got the flags");
        Map<?, ?> meta = (Map<?, ?>) JsonReader.parse(Files.readString(dir.resolve("one.meta.json")));
        assertEquals("ok", meta.get("status"));
        assertEquals(1L, ((Number) meta.get("benchmarks_run")).longValue());
    }

    @Test
    void shouldFailWhenNoBenchmarkProducesAResult(@TempDir Path dir) throws Exception {
        org.junit.jupiter.api.Assumptions.assumeFalse(io.engramhost.cuda.Cuda.available(), "CUDA is available here");
        int rc = BenchMain.run(List.of("--suite", "gpu", "--out", dir.toString(), "AttachBench.vmmGpu$", "-wi", "0",
                "-i", "1", "-p", "tableMiB=1"), System.out, System.err);
        assertEquals(1, rc, "the GPU benchmark skipped itself, so nothing was measured");
        Map<?, ?> meta = (Map<?, ?>) JsonReader.parse(Files.readString(dir.resolve("gpu.meta.json")));
        assertEquals("failed", meta.get("status"));
    }

    @Test
    void shouldListBenchmarksWithoutRunningOrWritingAnything(@TempDir Path dir) {
        ByteArrayOutputStream all = new ByteArrayOutputStream();
        assertEquals(0, BenchMain.run(List.of("--out", dir.toString(), "-l"), new PrintStream(all, true), System.err));
        assertTrue(all.toString().contains("io.engramhost.bench.HandshakeBench.clientConnect"), all.toString());
        assertTrue(all.toString().contains("io.engramhost.bench.AttachBench.vmmGpu"), "every suite: " + all);
        assertTrue(all.toString().contains("io.engramhost.bench.RestartBench.cClient"), "listed whatever its suite: " + all);
        ByteArrayOutputStream gpu = new ByteArrayOutputStream();
        assertEquals(0, BenchMain.run(List.of("--suite", "gpu", "--out", dir.toString(), "-lp"),
                new PrintStream(gpu, true), System.err));
        assertTrue(gpu.toString().contains("io.engramhost.bench.AttachBench.vmmGpu"), gpu.toString());
        assertTrue(gpu.toString().contains("param \"tableMiB\""), gpu.toString());
        assertTrue(!gpu.toString().contains("HandshakeBench"), "the gpu suite only: " + gpu);
        assertTrue(dir.toFile().list().length == 0, "no results or metadata written");
    }

    @Test
    void shouldExitWithUsageOnBadArguments() {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int rc = BenchMain.run(List.of("--suite", "nope"), System.out, new PrintStream(err, true));
        assertEquals(2, rc);
        assertTrue(err.toString().contains("--suite: 'nope' is not one of"));
        assertTrue(err.toString().contains("usage: BenchMain"));
    }
}
