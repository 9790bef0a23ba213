package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/**
 * Sysfs reads the real procfs files whole. A {@code /proc/sys} file has size 0 and answers only a read at
 * offset 0; {@code Files.readString} read one byte of it and then met end of file, so {@code vm.nr_hugepages}
 * of 1024 was read as 1 (in {@code topology} and in the huge-page refusal's "vm.nr_hugepages=1").
 */
class SysfsTest {
    /** What one read(2) at offset 0 gives, as {@code cat} sees it. */
    private static String oneRead(Path file) throws Exception {
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "r")) {
            byte[] buf = new byte[4096];
            int n = f.read(buf, 0, buf.length);
            return new String(buf, 0, Math.max(n, 0), StandardCharsets.US_ASCII);
        }
    }

    @Test
    void shouldReadAWholeProcSysFileOfSeveralDigits() throws Exception {
        Path pidMax = Path.of("/proc/sys/kernel/pid_max"); // at least 301: always several digits
        assumeTrue(Files.isReadable(pidMax), "no /proc/sys here");
        String expected = oneRead(pidMax);
        assumeTrue(expected.strip().length() > 1);
        assertEquals(expected, Sysfs.read(pidMax));
    }

    @Test
    void shouldReportVmNrHugepagesAsTheKernelHasIt() throws Exception {
        Path nr = Path.of("/proc/sys/vm/nr_hugepages");
        assumeTrue(Files.isReadable(nr), "no /proc/sys/vm/nr_hugepages here");
        assertEquals(Long.parseLong(oneRead(nr).strip()), Topology.read().nrHugepages());
    }

    @Test
    void shouldStillReadProcMeminfoWhole() throws Exception {
        Path meminfo = Path.of("/proc/meminfo"); // size 0 too, but answers reads at any offset
        assumeTrue(Files.isReadable(meminfo));
        String text = Sysfs.read(meminfo);
        assertEquals(true, text.contains("MemTotal:") && text.contains("HugePages_Total:") && text.endsWith("\n"), text);
    }
}
