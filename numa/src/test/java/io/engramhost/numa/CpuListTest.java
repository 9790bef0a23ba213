package io.engramhost.numa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

class CpuListTest {
    private static final Path FILE = Path.of("/sys/devices/system/node/node0/cpulist");

    @Test
    void shouldParseRangesAndSingles() {
        assertEquals(List.of(0, 1, 2, 3, 8, 9, 10, 11), CpuList.parse("0-3,8-11\n", FILE));
        assertEquals(List.of(5), CpuList.parse("5", FILE));
        assertEquals(List.of(0, 2, 3), CpuList.parse("3,0,2-2", FILE));
        assertEquals(List.of(), CpuList.parse("\n", FILE));
        assertEquals(224, CpuList.parse("0-55,112-167,56-111,168-223", FILE).size());
    }

    @Test
    void shouldFormatAsTheKernelDoes() {
        assertEquals("0-3,8-11", CpuList.format(List.of(8, 9, 10, 11, 0, 1, 2, 3)));
        assertEquals("0,2,4-5", CpuList.format(List.of(0, 2, 4, 5)));
        assertEquals("", CpuList.format(List.of()));
        assertEquals("0-55,112-167", CpuList.format(CpuList.parse("0-55,112-167", FILE)));
    }

    @Test
    void shouldNameTheFileWhenMalformed() {
        NumaException e = assertThrows(NumaException.class, () -> CpuList.parse("0-3,x", FILE));
        assertEquals("/sys/devices/system/node/node0/cpulist: malformed CPU/node list '0-3,x': 'x' is not a number"
                + " (expected e.g. 0-3,8-11)", e.getMessage());
        assertEquals("/sys/devices/system/node/node0/cpulist: malformed CPU/node list '7-3': range '7-3' runs"
                + " backwards (expected e.g. 0-3,8-11)", assertThrows(NumaException.class,
                        () -> CpuList.parse("7-3", FILE)).getMessage());
        assertThrows(NumaException.class, () -> CpuList.parse("0,,1", FILE));
        assertThrows(NumaException.class, () -> CpuList.parse("0-", FILE));
        assertThrows(NumaException.class, () -> CpuList.parse("99999999", FILE));
    }
}
