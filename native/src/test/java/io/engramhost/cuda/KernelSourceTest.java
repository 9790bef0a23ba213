package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The PTX in the jar holds every kernel, and matches the .cu source where nvcc can tell. */
class KernelSourceTest {
    private static final Path SOURCE = Path.of("cuda/engram_kernels.cu");

    @Test
    void shouldShipEveryKernelInThePtx() {
        String ptx = new String(GpuKernels.ptx(), StandardCharsets.US_ASCII);
        for (String kernel : new String[] {"engram_checksum", "engram_read_seq", "engram_gather"}) {
            assertTrue(ptx.contains(".visible .entry " + kernel + "("), "PTX lacks " + kernel);
        }
    }

    @Test
    @Timeout(60)
    void shouldMatchTheSourceWhenNvccIsHere() throws IOException, InterruptedException {
        assumeTrue(Files.exists(SOURCE), "run from native/: " + SOURCE + " not found");
        Path out = Files.createTempFile("engram_kernels", ".ptx");
        try {
            Process p;
            try {
                p = new ProcessBuilder("nvcc", "-ptx", "-arch=compute_75", "-O3", "-o", out.toString(), SOURCE.toString())
                        .redirectErrorStream(true).start();
            } catch (IOException e) {
                assumeTrue(false, "nvcc is not on the PATH: cannot check the committed PTX against its source");
                return;
            }
            String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(50, TimeUnit.SECONDS), "nvcc timed out");
            assertEquals(0, p.exitValue(), "nvcc failed: " + log);
            assertEquals(Files.readString(out), new String(GpuKernels.ptx(), StandardCharsets.US_ASCII),
                    "src/main/ptx/.../engram_kernels.ptx is stale: run `make ptx` in native/ and commit it");
        } finally {
            Files.deleteIfExists(out);
        }
    }
}
