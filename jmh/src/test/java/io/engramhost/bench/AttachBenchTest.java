package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.os.Posix;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(120)
class AttachBenchTest {
    @Test
    void shouldSkipItselfNamingTheCauseWithoutCuda() {
        Assumptions.assumeFalse(Cuda.available(), "CUDA is available here: the skip path cannot be seen");
        for (Runnable setup : new Runnable[] {() -> new AttachTables.Memfd4k().create(),
                () -> new AttachTables.MemfdHuge().create(), () -> new AttachTables.HostNuma().create(),
                () -> new AttachTables.Attached().check(), () -> new AttachTables.C().start()}) {
            IllegalStateException e = assertThrows(IllegalStateException.class, setup::run);
            assertTrue(e.getMessage().startsWith("AttachBench needs a CUDA GPU: " + Cuda.unavailabilityCause()),
                    e.getMessage());
        }
    }

    @Test
    @Tag("gpu")
    void shouldAttachOnEveryPathAndReleaseAfterEachShot() throws Exception {
        Assumptions.assumeTrue(Cuda.available(), () -> "no CUDA: " + Cuda.unavailabilityCause());
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        AttachBench b = new AttachBench();
        AttachTables.Attached attached = new AttachTables.Attached();
        attached.check();
        AttachTables.C c = new AttachTables.C();
        c.start();
        assertTrue(b.cRoundTrip(c).startsWith("{\"op\":\"ping\""));
        AttachTables.Memfd4k small = new AttachTables.Memfd4k();
        small.tableMiB = 64;
        small.create();
        assertNotEquals(0L, b.memfdCpuView(small, attached));
        attached.release();
        assertNotEquals(0L, b.memfdCpuViewPopulated(small, attached));
        attached.release();
        assertNotEquals(0L, b.memfdRegister(small, attached));
        attached.release();
        assertTrue(b.cMemfdCpuView(small, c).contains("\"register_ms\":0.000"));
        c.release();
        assertTrue(b.cMemfdRegister(small, c).startsWith("{\"op\":\"attach\""));
        c.release();
        small.free();
        AttachTables.HostNuma numa = new AttachTables.HostNuma();
        numa.tableMiB = 64;
        numa.create();
        for (int i = 0; i < 2; i++) {
            numa.export();
            assertNotEquals(0L, i == 0 ? b.vmmGpu(numa, attached) : b.vmmGpuCpu(numa, attached));
            attached.release();
            String reply = i == 0 ? b.cVmmGpu(numa, c) : b.cVmmGpuCpu(numa, c);
            assertTrue(reply.contains(i == 0 ? "\"cpu_access_ms\":0.000" : "\"gpu_access_ms\":"), reply);
            c.release();
            numa.closeFd();
        }
        numa.free();
        if (Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim()) >= 32) {
            AttachTables.MemfdHuge huge = new AttachTables.MemfdHuge();
            huge.tableMiB = 64;
            huge.create();
            assertNotEquals(0L, b.memfdHugetlbRegister(huge, attached));
            attached.release();
            assertTrue(b.cMemfdHugetlbRegister(huge, c).startsWith("{\"op\":\"attach\""));
            c.release();
            huge.free();
        }
        c.stop();
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "every table and view released");
    }
}
