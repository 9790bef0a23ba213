package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.os.Posix;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * RestartBench's state and methods called directly (no JMH): the CPU view runs both clients for real here;
 * the failure paths use stand-in children; the GPU view of every backend runs on a GPU machine.
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

    private static Set<Long> liveChildren() {
        return ProcessHandle.current().children().filter(ProcessHandle::isAlive).map(ProcessHandle::pid)
                .collect(Collectors.toSet());
    }

    /** The C client bin/test builds first; missing, the test fails naming how to build it (no silent skip). */
    private static void requireEngramAttach() {
        new RestartBench().engramAttach();
    }

    @Test
    void shouldRestartBothClientsOnTheCpuViewAndLeaveNothingBehind() throws Exception {
        requireEngramAttach();
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        Set<Long> childrenBefore = liveChildren();
        RestartBench b = bench("memfd", 16, "cpu");
        b.setUp();
        for (int i = 0; i < 2; i++) {
            String line = b.javaClient();
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
        b.tearDown();
        assertEquals(childrenBefore, liveChildren(), "no client outlives the trial");
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "daemon, table and scratch files released");
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
    void shouldRestartBothClientsWithAGpuViewOnEveryBackend() throws Exception {
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
            } finally {
                b.tearDown();
            }
            assertEquals(childrenBefore, liveChildren(), backend);
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "every table and daemon released");
    }
}
