package io.engramhost.seed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.os.RawMemory;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The seed's staging buffers: made up to the budget, used again once given back, every one unmapped at close. */
class StagingPoolTest {
    /** Whether a mapping of this process holds {@code address} (/proc/self/maps; the kernel may merge neighbours). */
    private static boolean mapped(long address) throws IOException {
        List<String> lines = Files.readAllLines(Path.of("/proc/self/maps"));
        return lines.stream().anyMatch(l -> {
            String[] range = l.substring(0, l.indexOf(' ')).split("-");
            return Long.parseUnsignedLong(range[0], 16) <= address && address < Long.parseUnsignedLong(range[1], 16);
        });
    }

    @Test
    void shouldMakeBuffersUpToTheBudgetReuseThemAndUnmapThemAll() throws IOException {
        long a;
        long b;
        try (StagingPool pool = new StagingPool(2 * ContentDigest.CHUNK + 1)) {
            a = pool.take();
            b = pool.take();
            assertNotEquals(0, a);
            assertNotEquals(0, b);
            assertEquals(0, pool.take(), "the budget holds two buffers, not three");
            RawMemory.fill(a, ContentDigest.CHUNK, (byte) 7); // the whole buffer is writable
            RawMemory.fill(b + ContentDigest.CHUNK - 1, 1, (byte) 7);
            assertTrue(mapped(a));
            assertTrue(mapped(b + ContentDigest.CHUNK - 1));
            pool.give(a, ContentDigest.CHUNK);
            assertEquals(a, pool.take(), "a buffer given back is taken again");
            pool.give(b, 0);
            assertEquals(ContentDigest.CHUNK, pool.bytesStaged(), "only what went into a region counts");
            assertEquals(2, pool.buffers());
        }
        assertFalse(mapped(a), "unmapped at close");
        assertFalse(mapped(b), "unmapped at close");
    }

    @Test
    void shouldStageNothingBelowOneChunkOrOnceClosed() {
        try (StagingPool pool = new StagingPool(ContentDigest.CHUNK - 1)) {
            assertEquals(0, pool.take());
        }
        StagingPool pool = new StagingPool(ContentDigest.CHUNK);
        pool.close();
        assertEquals(0, pool.take());
        assertEquals(0, pool.buffers());
    }
}
