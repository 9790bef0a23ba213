package io.engramhost.cli;

import java.nio.file.Path;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The takeover under load on a GPU, per backend: the clients import with GPU views (cuda-vmm handles imported and
 * mapped, memfds registered with CUDA) while the daemon is replaced ({@link TakeoverProcessTest#takeoverUnderLoad}).
 */
@Tag("gpu")
@Timeout(600)
class TakeoverGpuTest {
    @ParameterizedTest
    @ValueSource(strings = {"memfd", "memfd-hugetlb", "cuda-vmm"})
    void takeoverUnderLoadWithGpuViews(String backend, @TempDir Path dir) throws Exception {
        GpuIntegrationTest.assumeGpuFor(backend);
        TakeoverProcessTest.takeoverUnderLoad(dir, backend, true);
    }
}
