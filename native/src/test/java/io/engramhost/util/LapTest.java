package io.engramhost.util;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class LapTest {
    @Test
    void shouldSplitTheTotalIntoLaps() throws InterruptedException {
        Lap lap = Lap.start();
        Thread.sleep(2);
        long first = lap.lap();
        Thread.sleep(2);
        long second = lap.lap();
        long total = lap.total();
        assertTrue(first >= 2_000_000, "first lap " + first);
        assertTrue(second >= 2_000_000, "second lap " + second);
        assertTrue(total >= first + second, "total " + total + " covers both laps");
    }

    @Test
    void shouldStartTheNextLapAtEachLap() {
        Lap lap = Lap.start();
        long a = lap.lap();
        long b = lap.lap();
        assertTrue(a >= 0 && b >= 0);
        assertTrue(lap.total() >= a + b);
    }

    @Test
    void shouldConvertNanosToMillisAndSeconds() {
        assertEquals(1.5, Lap.millis(1_500_000));
        assertEquals(0.25, Lap.seconds(250_000_000));
        assertEquals(0.0, Lap.millis(0));
    }
}
