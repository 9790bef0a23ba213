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
                () -> new AttachTables.Attached().check()}) {
            IllegalStateException e = assertThrows(IllegalStateException.class, setup::run);
            assertTrue(e.getMessage().startsWith("AttachBench needs a CUDA GPU: " + Cuda.unavailabilityCause()),
                    e.getMessage());
        }
    }

    @Test
    @Tag("gpu")
    void shouldAttachOnEveryPathAndReleaseAfterEachShot() throws Exception {
        Assumptions.assumeTrue(Cuda.available(), () -> "no CUDA: " + Cuda.unavailabilityCause());
        int fdsBefore = Posix.countOpenFds();
        AttachBench b = new AttachBench();
        AttachTables.Attached attached = new AttachTables.Attached();
        attached.check();
        AttachTables.Memfd4k small = new AttachTables.Memfd4k();
        small.tableMiB = 64;
        small.create();
        assertNotEquals(0L, b.memfdCpuView(small, attached));
        attached.release();
        assertNotEquals(0L, b.memfdCpuViewPopulated(small, attached));
        attached.release();
        assertNotEquals(0L, b.memfdRegister(small, attached));
        attached.release();
        small.free();
        AttachTables.HostNuma numa = new AttachTables.HostNuma();
        numa.tableMiB = 64;
        numa.create();
        for (int i = 0; i < 2; i++) {
            numa.export();
            assertNotEquals(0L, i == 0 ? b.vmmGpu(numa, attached) : b.vmmGpuCpu(numa, attached));
            attached.release();
            numa.closeFd();
        }
        numa.free();
        if (Long.parseLong(Files.readString(Path.of("/proc/sys/vm/nr_hugepages")).trim()) >= 32) {
            AttachTables.MemfdHuge huge = new AttachTables.MemfdHuge();
            huge.tableMiB = 64;
            huge.create();
            assertNotEquals(0L, b.memfdHugetlbRegister(huge, attached));
            attached.release();
            huge.free();
        }
        assertEquals(fdsBefore, Posix.countOpenFds(), "every table and view released");
    }
}
