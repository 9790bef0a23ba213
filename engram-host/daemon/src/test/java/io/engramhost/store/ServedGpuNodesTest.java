package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.OptionalInt;
import org.junit.jupiter.api.Test;

/** --numa auto decides from the nodes of the GPUs this daemon serves (--gpus), not from every GPU of the machine. */
class ServedGpuNodesTest {
    private static final List<OptionalInt> TWO_SOCKETS = List.of(OptionalInt.of(0), OptionalInt.of(0), OptionalInt.of(1),
            OptionalInt.empty());

    @Test
    void shouldTakeEveryGpuWithoutGpus() {
        assertEquals(TWO_SOCKETS, CatalogFactory.served(TWO_SOCKETS, null));
    }

    @Test
    void shouldTakeTheServedGpusInTheirOrder() {
        assertEquals(List.of(OptionalInt.of(1)), CatalogFactory.served(TWO_SOCKETS, List.of(2)));
        assertEquals(List.of(OptionalInt.of(1), OptionalInt.of(0)), CatalogFactory.served(TWO_SOCKETS, List.of(2, 0)));
        assertEquals(List.of(OptionalInt.empty()), CatalogFactory.served(TWO_SOCKETS, List.of(3)));
    }

    @Test
    void shouldNameTheFlagForAGpuThatDoesNotExist() {
        assertEquals("--gpus: GPU 4 does not exist (this machine has 4 GPUs)",
                assertThrows(IllegalArgumentException.class, () -> CatalogFactory.served(TWO_SOCKETS, List.of(0, 4)))
                        .getMessage());
        assertEquals("--gpus: GPU -1 does not exist (this machine has 1 GPU)",
                assertThrows(IllegalArgumentException.class,
                        () -> CatalogFactory.served(List.of(OptionalInt.of(0)), List.of(-1))).getMessage());
    }
}
