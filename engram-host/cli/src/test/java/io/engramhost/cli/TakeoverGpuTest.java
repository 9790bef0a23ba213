package io.engramhost.cli;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.cuda.Cuda;
import io.engramhost.numa.HugePagePool;
import io.engramhost.numa.Topology;
import io.engramhost.vmm.VmmSupport;
import java.nio.file.Path;
import java.util.List;
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
        assumeTrue(Cuda.available(), Cuda.unavailabilityCause());
        List<String> missing = VmmSupport.missingForHostTables(Cuda.device(0));
        assumeTrue(missing.isEmpty(), "GPU 0 lacks " + missing);
        if (backend.equals("memfd-hugetlb")) {
            long free = Topology.read().systemHugePages().getOrDefault(2L << 20, new HugePagePool(2L << 20, 0, 0)).free();
            assumeTrue(free >= 64, "memfd-hugetlb needs 64 free 2 MiB huge pages; " + free + " are free"
                    + " (reserve them with sysctl vm.nr_hugepages=N)");
        }
        TakeoverProcessTest.takeoverUnderLoad(dir, backend, true);
    }
}
