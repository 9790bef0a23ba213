package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.protocol.RegionKind;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(120)
class AttachBenchTest {
    @Test
    void shouldSkipItselfNamingTheCauseWithoutCuda() {
        Assumptions.assumeFalse(Cuda.available(), "CUDA is available here: the skip path cannot be seen");
        for (Runnable setup : new Runnable[] {() -> new AttachTables.MemfdHuge().create(),
                () -> new AttachTables.HostNuma().create(), () -> new AttachTables.AttachedGpu().check(),
                () -> new AttachTables.CLibGpu().context(), () -> new AttachTables.Peer().start()}) {
            IllegalStateException e = assertThrows(IllegalStateException.class, setup::run);
            assertTrue(e.getMessage().startsWith("AttachBench needs a CUDA GPU: " + Cuda.unavailabilityCause()),
                    e.getMessage());
        }
    }

    /**
     * The memfd CPU view needs no GPU: in Java, and in the C library in this process (the C baseline), whose mapping
     * is read-only and shared, leaves the fd open, and is gone once released; its failures name the call.
     */
    @Test
    void shouldAttachTheMemfdCpuViewInJavaAndInTheCLibraryWithoutAGpu() throws Exception {
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        AttachBench b = new AttachBench();
        AttachTables.Memfd4k table = new AttachTables.Memfd4k();
        table.tableMiB = 8;
        table.create();
        AttachTables.Attached attached = new AttachTables.Attached();
        assertNotEquals(0L, b.memfdCpuView(table, attached));
        attached.release();
        assertNotEquals(0L, b.memfdCpuViewPopulated(table, attached));
        attached.release();
        assertEquals(List.of(), mappingsOf(table), "the Java views released");

        AttachTables.CLib c = new AttachTables.CLib();
        c.load();
        for (int shot = 0; shot < 2; shot++) {
            long address = b.cLibMemfdCpuView(table, c);
            List<String> maps = mappingsOf(table);
            assertEquals(1, maps.size(), () -> "one mapping of the memfd while attached: " + maps);
            assertTrue(maps.get(0).startsWith(Long.toHexString(address) + "-" + Long.toHexString(address + (8L << 20))
                    + " r--s "), maps.get(0));
            IllegalStateException twice = assertThrows(IllegalStateException.class, () -> b.cLibMemfdCpuView(table, c));
            assertTrue(twice.getMessage().endsWith("engram_bench_attach: a region is still attached"
                    + " (engram_bench_release first)"), twice.getMessage());
            c.release();
            assertEquals(List.of(), mappingsOf(table), "released by the C code");
        }
        c.release(); // nothing attached: nothing to do
        CAttach lib = c.loaded();
        IllegalStateException nothing = assertThrows(IllegalStateException.class, lib::release);
        assertTrue(nothing.getMessage().endsWith("engram_bench_release: engram_bench_release: nothing is attached"),
                nothing.getMessage());
        try (Fd notMappable = Posix.open(Path.of("/"), Posix.O_RDONLY, 0)) { // a directory: mmap fails (ENODEV)
            IllegalStateException unmapped = assertThrows(IllegalStateException.class,
                    () -> lib.attach(RegionKind.MEMFD, notMappable, 1L << 20, -1, 0));
            assertTrue(unmapped.getMessage().startsWith("C attach (" + PeerClients.attachLibrary().toAbsolutePath()
                    + "): engram_bench_attach(MEMFD, 1048576 bytes, flags 0): mmap(PROT_READ, MAP_SHARED, a region fd)"
                    + " failed: "), unmapped.getMessage());
        }
        IllegalStateException noContext = assertThrows(IllegalStateException.class,
                () -> lib.attach(RegionKind.MEMFD, table.region.fd(), table.region.size(), -1, CAttach.FLAG_REGISTER));
        assertTrue(noContext.getMessage().contains("needs CUDA: call engram_bench_context first"), noContext.getMessage());
        if (!Cuda.available()) {
            IllegalStateException noGpu = assertThrows(IllegalStateException.class, () -> lib.context(0));
            assertTrue(noGpu.getMessage().contains("engram_bench_context(GPU 0): libcuda.so.1"), noGpu.getMessage());
        }
        table.free(); // the fd is still open here: the C code did not close it
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "every table and view released");
    }

    /** The lines of /proc/self/maps that map the table's memfd. */
    private static List<String> mappingsOf(AttachTables.Memfd4k table) throws Exception {
        return Files.readAllLines(Path.of("/proc/self/maps")).stream()
                .filter(l -> l.contains("/memfd:engram.bench.attach ")).toList();
    }

    @Test
    @Tag("gpu")
    void shouldAttachOnEveryPathAndReleaseAfterEachShot() throws Exception {
        Assumptions.assumeTrue(Cuda.available(), () -> "no CUDA: " + Cuda.unavailabilityCause());
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        AttachBench b = new AttachBench();
        AttachTables.Attached cpu = new AttachTables.Attached();
        AttachTables.AttachedGpu attached = new AttachTables.AttachedGpu();
        attached.check();
        AttachTables.CLib cLib = new AttachTables.CLib();
        cLib.load();
        AttachTables.CLibGpu c = new AttachTables.CLibGpu();
        c.load();
        c.context();
        AttachTables.Peer peer = new AttachTables.Peer();
        peer.start();
        assertTrue(b.cRoundTrip(peer).startsWith("{\"op\":\"ping\""));
        AttachTables.Memfd4k small = new AttachTables.Memfd4k();
        small.tableMiB = 64;
        small.create();
        assertNotEquals(0L, b.memfdCpuView(small, cpu));
        cpu.release();
        assertNotEquals(0L, b.memfdCpuViewPopulated(small, cpu));
        cpu.release();
        assertNotEquals(0L, b.memfdRegister(small, attached));
        attached.release();
        assertNotEquals(0L, b.cLibMemfdCpuView(small, cLib));
        cLib.release();
        assertNotEquals(0L, b.cLibMemfdRegister(small, c));
        c.release();
        small.free();
        AttachTables.HostNuma numa = new AttachTables.HostNuma();
        numa.tableMiB = 64;
        numa.create();
        for (int i = 0; i < 2; i++) {
            numa.export();
            io.engramhost.os.RawMemory.putLong(numa.hostAddress(), 0x5eed0000L + i);
            long java = i == 0 ? b.vmmGpu(numa, attached) : b.vmmGpuCpu(numa, attached);
            assertNotEquals(0L, java);
            attached.release();
            long cVa = i == 0 ? b.cLibVmmGpu(numa, c) : b.cLibVmmGpuCpu(numa, c);
            assertNotEquals(0L, cVa);
            if (i == 1) { // the CPU view at the C code's VA: the same bytes as the daemon's mapping
                assertEquals(0x5eed0001L, io.engramhost.os.RawMemory.getLong(cVa));
            }
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
            assertNotEquals(0L, b.cLibMemfdHugetlbRegister(huge, c));
            c.release();
            huge.free();
        }
        peer.stop();
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "every table and view released");
    }
}
