package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.engramhost.util.Bytes;
import org.junit.jupiter.api.Test;

class CudaExceptionTest {
    @Test
    void shouldNameTheCallAndTheResultByNameAndNumber() {
        CudaException e = new CudaException("cuMemCreate(" + Bytes.format(16L << 30) + ", " + Location.hostNuma(0) + ")",
                CudaErrors.OUT_OF_MEMORY);
        assertEquals("cuMemCreate(16.0 GiB, HOST_NUMA node 0) failed: CUDA_ERROR_OUT_OF_MEMORY (2)", e.getMessage());
        assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName());
        assertEquals(2, e.result());
    }

    @Test
    void shouldFallBackToTheNumberForAnUnknownResult() {
        assertEquals("CUresult 123456", CudaErrors.name(123456));
        assertEquals("x failed: CUDA_ERROR_NOT_SUPPORTED (801); a hint", new CudaException("x", 801, "a hint").getMessage());
    }

    @Test
    void shouldNameALocation() {
        assertEquals("GPU 1", Location.device(1).toString());
    }
}
