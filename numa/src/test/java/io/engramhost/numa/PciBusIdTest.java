package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class PciBusIdTest {
    @Test
    void shouldNormaliseCudaBusIdsToSysfsNames() {
        assertEquals("0000:1b:00.0", PciBusId.normalise("00000000:1B:00.0"));
        assertEquals("0000:db:00.0", PciBusId.normalise("0000:DB:00.0"));
        assertEquals("0000:1b:00.0", PciBusId.normalise("1b:00.0"));
        assertEquals("0001:0a:1f.7", PciBusId.normalise("1:a:1f.7"));
        assertEquals("10000:01:00.0", PciBusId.normalise("10000:01:00.0")); // VMD domains have five digits
    }

    @Test
    void shouldRejectWhatIsNotABusId() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PciBusId.normalise("GPU-8e1f5c2a"));
        assertEquals("not a PCI bus id: 'GPU-8e1f5c2a' (expected dddd:bb:dd.f, e.g. 0000:1b:00.0 or CUDA's"
                + " 00000000:1B:00.0)", e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> PciBusId.normalise("0000:1b:00.8"));
        assertThrows(IllegalArgumentException.class, () -> PciBusId.normalise("0000:1b:00"));
        assertThrows(IllegalArgumentException.class, () -> PciBusId.normalise(null));
    }
}
