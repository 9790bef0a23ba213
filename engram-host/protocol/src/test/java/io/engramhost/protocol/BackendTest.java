package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;

class BackendTest {
    @Test
    void shouldNameEachBackendAsItsRegionKindDoes() {
        assertEquals(List.of("memfd", "memfd-hugetlb", "cuda-vmm"), Backend.wireNames());
        for (Backend b : Backend.values()) {
            assertEquals(b.regionKind().backend(), b.wireName());
            assertEquals(b, Backend.of(b.wireName()));
            assertEquals(b.wireName(), b.toString());
        }
    }

    @Test
    void shouldRefuseAnUnknownNameListingTheAllowedOnes() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Backend.of("tape"));
        assertEquals("'tape' is not one of memfd, memfd-hugetlb, cuda-vmm", e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Backend.of("MEMFD"));
    }
}
