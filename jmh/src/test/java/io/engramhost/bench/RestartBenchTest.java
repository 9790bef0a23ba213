package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.json.JsonReader;
import io.engramhost.os.Posix;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * RestartBench's state and methods called directly (no JMH): the CPU view runs the three clients for real here
 * (Python without torch, which CI lacks); the failure paths use stand-in children; the GPU view of every backend
 * runs on a GPU machine, Python with torch.
 */
@Timeout(300)
class RestartBenchTest {
    @TempDir
    Path tmp;

    /** A first daemon opens what the JVM then keeps (/dev/urandom for SHA-256, a socket): before any fd count. */
    @BeforeAll
    static void warmUp() {
        RestartBench b = bench("memfd", 1, "cpu");
        b.setUp();
        b.tearDown();
    }

    private static RestartBench bench(String backend, long mib, String view) {
        RestartBench b = new RestartBench();
        b.backend = backend;
        b.tableMiB = mib;
        b.view = view;
        return b;
    }

    private static RestartBench bench(String backend, long mib, String view, boolean torch) {
        RestartBench b = bench(backend, mib, view);
        b.torch = torch;
        return b;
    }

    /** Whether python3 on PATH imports torch (the GPU machine's does; CI's does not). */
    private static boolean torchImportable() throws Exception {
        Process p = new ProcessBuilder(PeerClients.pythonInterpreter(PeerClients.Lookup.system()).toString(), "-c",
                "import torch").redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        return p.waitFor() == 0;
    }

    /** The one table, named and sized, in a client's JSON line; returns the parsed table. */
    private static Map<?, ?> assertNamesTheTable(String line, long mib, String backend) {
        Object doc = JsonReader.parse(line);
        assertTrue(doc instanceof Map<?, ?> m && m.get("tables") instanceof List<?> l && l.size() == 1, line);
        Map<?, ?> t = (Map<?, ?>) ((List<?>) ((Map<?, ?>) doc).get("tables")).get(0);
        assertEquals(BenchTables.name(0), t.get("name"), line);
        assertEquals(mib << 20, t.get("bytes"), line);
        assertEquals(backend, t.get("backend"), line);
        return (Map<?, ?>) doc;
    }

    private static Set<Long> liveChildren() {
        return ProcessHandle.current().children().filter(ProcessHandle::isAlive).map(ProcessHandle::pid)
                .collect(Collectors.toSet());
    }

    /** The C client bin/test builds first; missing, the test fails naming how to build it (no silent skip). */
    private static void requireEngramAttach() {
        new RestartBench().engramAttach();
    }

    @Test
    void shouldRestartEveryClientOnTheCpuViewAndLeaveNothingBehind() throws Exception {
        requireEngramAttach();
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        Set<Long> childrenBefore = liveChildren();
        RestartBench b = bench("memfd", 16, "cpu", false);
        b.setUp();
        for (int i = 0; i < 4; i++) { // with its AppCDS archive (made by the first call), then without
            String line = i < 2 ? b.javaClient() : b.javaClientWithoutAppCds();
            assertTrue(line.startsWith("{") && line.contains(BenchTables.name(0)), line);
            assertEquals(childrenBefore.size() + 1, liveChildren().size(), "the Java client runs until released");
            b.awaitExit(); // checks exit 0 and the table in the line
            assertEquals(childrenBefore, liveChildren());
        }
        for (int i = 0; i < 2; i++) {
            assertEquals(RestartBench.C_READY, b.cClient());
            b.awaitExit();
            assertEquals(childrenBefore, liveChildren());
        }
        for (int i = 0; i < 2; i++) {
            String line = b.pythonClient(); // the real python -m engram_host, without --torch
            Map<?, ?> doc = assertNamesTheTable(line, 16, "memfd");
            assertFalse(doc.containsKey("torch"), "no tensors were asked for: " + line);
            assertEquals(childrenBefore.size() + 1, liveChildren().size(), "the Python client runs until released");
            b.awaitExit(); // checks exit 0 and the table in the line
            assertEquals(childrenBefore, liveChildren());
        }
        for (int i = 0; i < 2; i++) { // the process waits (not timed) until the shot tells it to go
            b.startWaitingPython();
            assertEquals(childrenBefore.size() + 1, liveChildren().size(), "the Python process waits for its go");
            assertNamesTheTable(b.pythonAfterTorch(), 16, "memfd");
            b.awaitExit();
            assertEquals(childrenBefore, liveChildren());
        }
        assertTrue(b.python().environment().get("PYTHONPATH").startsWith(b.python().packageDir().toString()));
        assertEquals(RestartBench.PYTHON_READY, b.pythonImportTorch()); // torch=false: the bare interpreter
        b.awaitExit();
        assertEquals(childrenBefore, liveChildren());
        b.tearDown();
        assertEquals(childrenBefore, liveChildren(), "no client outlives the trial");
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "daemon, table and scratch files released");
    }

    /** Without PyTorch, torch=true fails the Python benchmarks naming torch (a benchmark cannot skip). */
    @Test
    void shouldFailThePythonBenchmarksNamingTorchWhereItIsMissing() throws Exception {
        Assumptions.assumeFalse(torchImportable(), "torch is importable here: its absence cannot be seen");
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        Set<Long> childrenBefore = liveChildren();
        RestartBench b = bench("memfd", 4, "cpu", true);
        b.setUp();
        try {
            for (Runnable bench : List.<Runnable>of(b::pythonClient, b::pythonImportTorch)) {
                IllegalStateException e = assertThrows(IllegalStateException.class, bench::run);
                assertTrue(e.getMessage().startsWith("the Python client needs PyTorch (torch=true")
                        && e.getMessage().contains("fails `import torch`: ModuleNotFoundError")
                        && e.getMessage().contains("-p torch=false"), e.getMessage());
                assertEquals(childrenBefore, liveChildren());
            }
            assertEquals(RestartBench.C_READY, b.cClient(), "the other peers still run");
            b.awaitExit();
        } finally {
            b.tearDown();
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    /** A JSON line that lacks the table or, with torch, its tensor fails the shot after the exit, quoting the line. */
    @Test
    void shouldRefuseAPythonLineWithoutTheTableOrItsTensor() throws Exception {
        Set<Long> childrenBefore = liveChildren();
        // A stand-in engram_host whose CLI prints a table one byte too large without --torch, and with --torch the
        // right table but no tensor; run by the real interpreter.
        Path fake = tmp.resolve("fake");
        Files.createDirectories(fake.resolve("engram_host"));
        Files.writeString(fake.resolve("engram_host/__init__.py"), "");
        Files.writeString(fake.resolve("engram_host/__main__.py"), String.join("\n",
                "import json, sys",
                "torch = '--torch' in sys.argv",
                "t = {'name': '" + BenchTables.name(0) + "', 'bytes': " + (4L << 20) + " + (0 if torch else 1),"
                        + " 'backend': 'memfd'}",
                "print(json.dumps({'tables': [t], 'torch': {'tensors': {}}}), flush=True)", ""));
        PeerClients.Python real = PeerClients.python(false);
        for (boolean torch : List.of(false, true)) {
            RestartBench b = bench("memfd", 4, "cpu", torch);
            b.setUp();
            try {
                b.python = new PeerClients.Python(real.interpreter(), fake, real.version(), null,
                        Map.of("PYTHONPATH", fake.toString()));
                String line = b.pythonClient();
                IllegalStateException e = assertThrows(IllegalStateException.class, b::awaitExit);
                String expected = torch ? "did not report a tensor [16384, 256] on cpu for " + BenchTables.name(0)
                        : "did not report the one table of " + (4L << 20) + " bytes (memfd)";
                assertTrue(e.getMessage().startsWith("the Python client " + expected)
                        && e.getMessage().contains(line), e.getMessage());
                assertEquals(childrenBefore, liveChildren());
            } finally {
                b.tearDown();
            }
        }
    }

    @Test
    void shouldNameTheCauseWhenTheGpuViewHasNoCuda() {
        Assumptions.assumeFalse(Cuda.available(), "CUDA is available here: the refusal cannot be seen");
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        for (String backend : List.of("memfd", "memfd-hugetlb", "cuda-vmm")) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> bench(backend, 16, "gpu").setUp());
            assertTrue(e.getMessage().startsWith("RestartBench needs a CUDA GPU: " + Cuda.unavailabilityCause()),
                    e.getMessage());
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    @Test
    void shouldRefuseParametersItCannotRun() {
        IllegalArgumentException vmm = assertThrows(IllegalArgumentException.class,
                () -> bench("cuda-vmm", 16, "cpu").setUp());
        assertTrue(vmm.getMessage().contains("view=cpu with backend=cuda-vmm") && vmm.getMessage().contains("CUDA"),
                vmm.getMessage());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> bench("disk", 16, "cpu").setUp()).getMessage()
                .contains("not one of memfd, memfd-hugetlb, cuda-vmm"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> bench("memfd", 16, "both").setUp()).getMessage()
                .contains("not one of gpu, cpu"));
    }

    /** A stand-in for engram-attach: a shell script doing {@code body}, ignoring its arguments. */
    private Path script(String name, String body) throws Exception {
        Path p = tmp.resolve(name);
        Files.writeString(p, "#!/bin/sh\n" + body + "\n");
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwx------"));
        return p;
    }

    @Test
    void shouldKillAndNameAChildThatFailsOrHangsAndLeaveNone() throws Exception {
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        Set<Long> childrenBefore = liveChildren();
        RestartBench b = bench("memfd", 4, "cpu");
        b.setUp();
        b.childTimeoutMillis = 1500;

        b.attachBinary = script("fails-early", "echo 'engram-attach: no daemon listens here' >&2; exit 3");
        IllegalStateException early = assertThrows(IllegalStateException.class, b::cClient);
        assertTrue(early.getMessage().contains("ended with exit status 3 before its ready line")
                && early.getMessage().contains("fails-early --socket") && early.getMessage().contains("no daemon listens here"),
                early.getMessage());
        assertEquals(childrenBefore, liveChildren());

        b.attachBinary = script("fails-late", "echo attached 1; echo 'release failed' >&2; exit 4");
        assertEquals(RestartBench.C_READY, b.cClient());
        IllegalStateException late = assertThrows(IllegalStateException.class, b::awaitExit);
        assertTrue(late.getMessage().contains("exited with status 4 after its ready line")
                && late.getMessage().contains("release failed"), late.getMessage());
        assertEquals(childrenBefore, liveChildren());

        b.attachBinary = script("silent", "echo chatter; exec sleep 600");
        IllegalStateException silent = assertThrows(IllegalStateException.class, b::cClient);
        assertTrue(silent.getMessage().contains("did not print its ready line within 1500 ms and was killed")
                && silent.getMessage().contains("chatter"), silent.getMessage());
        assertEquals(childrenBefore, liveChildren());

        b.attachBinary = script("stays", "echo attached 1; sleep 600 & wait");
        assertEquals(RestartBench.C_READY, b.cClient());
        IllegalStateException stays = assertThrows(IllegalStateException.class, b::awaitExit);
        assertTrue(stays.getMessage().contains("did not exit within 1500 ms of its ready line and was killed"),
                stays.getMessage());
        assertEquals(childrenBefore, liveChildren());

        b.attachBinary = script("left-running", "echo attached 1; exec sleep 600");
        assertEquals(RestartBench.C_READY, b.cClient());
        b.tearDown(); // a trial that ends with a child still running kills it
        assertEquals(childrenBefore, liveChildren());
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    @Test
    @Tag("gpu")
    void shouldRestartEveryClientWithAGpuViewOnEveryBackend() throws Exception {
        Assumptions.assumeTrue(Cuda.available(), () -> "no CUDA: " + Cuda.unavailabilityCause());
        requireEngramAttach();
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        Set<Long> childrenBefore = liveChildren();
        boolean huge = Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim()) >= 32;
        for (String backend : huge ? List.of("memfd", "memfd-hugetlb", "cuda-vmm") : List.of("memfd", "cuda-vmm")) {
            RestartBench b = bench(backend, 64, "gpu");
            b.setUp();
            try {
                assertTrue(b.javaClient().contains("gpu_address"), backend);
                b.awaitExit();
                assertEquals(RestartBench.C_READY, b.cClient(), backend);
                b.awaitExit();
                // Python with torch: every table a tensor on cuda:0 (awaitExit checks it), and import torch alone.
                Map<?, ?> doc = assertNamesTheTable(b.pythonClient(), 64, backend);
                assertTrue(doc.get("torch") instanceof Map<?, ?> t && t.get("import_torch_ms") != null, backend);
                b.awaitExit();
                assertEquals(RestartBench.PYTHON_READY, b.pythonImportTorch(), backend);
                b.awaitExit();
                b.startWaitingPython();
                assertNamesTheTable(b.pythonAfterTorch(), 64, backend);
                b.awaitExit();
            } finally {
                b.tearDown();
            }
            assertEquals(childrenBefore, liveChildren(), backend);
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "every table and daemon released");
    }
}
