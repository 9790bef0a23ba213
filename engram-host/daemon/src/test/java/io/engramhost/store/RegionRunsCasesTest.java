package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.json.JsonReader;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.util.RegionRuns;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * Every case of conformance/region-runs.json, which the C client's run_end is held to as well
 * (native/c/check_region_runs.py): the daemon's cut of a table into a run (RegionRuns, and RegionPlan, which plans
 * with it), and a client's search for the last region of a table's run (RegionRuns.Ends, and Manifest.runLength).
 */
class RegionRunsCasesTest {
    private static final Path CASES = Path.of(System.getProperty("user.dir")).getParent().getParent()
            .resolve("conformance/region-runs.json");

    @TestFactory
    Stream<DynamicTest> everyCase() throws Exception {
        Map<String, Object> doc = map(JsonReader.parse(Files.readAllBytes(CASES)));
        List<DynamicTest> tests = new ArrayList<>();
        for (Object c : (List<?>) doc.get("cut")) {
            tests.add(DynamicTest.dynamicTest("cut: " + map(c).get("name"), () -> cut(map(c))));
        }
        for (Object c : (List<?>) doc.get("find")) {
            tests.add(DynamicTest.dynamicTest("find: " + map(c).get("name"), () -> find(map(c))));
        }
        assertTrue(tests.size() > 20, "region-runs.json holds " + tests.size() + " cases");
        return tests.stream();
    }

    private static void cut(Map<String, Object> c) {
        long length = num(c, "length");
        long max = num(c, "max_region");
        long granule = num(c, "granule");
        if (c.containsKey("error")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> RegionPlan.plan(List.of(length), 1, Long.MAX_VALUE, 256, granule, max));
            assertTrue(e.getMessage().contains((String) c.get("error")), e.getMessage());
            return;
        }
        long count = RegionRuns.count(length, max);
        assertEquals(num(c, "count"), count, "count");
        long last = count == 0 ? 0 : RegionRuns.size(count - 1, length, max, granule);
        assertEquals(num(c, "last_size"), last, "the last region's size");
        long bytes = count == 0 ? 0 : (count - 1) * max + last;
        if (count > 1) {
            for (long k = 0; k < count - 1; k += Math.max(1, count / 64)) { // every region but the last is maxRegion
                assertEquals(max, RegionRuns.size(k, length, max, granule), "region " + k);
                assertEquals(RegionRuns.start(k + 1, max), RegionRuns.end(k, length, max), "region " + k + "'s end");
            }
        }
        assertEquals(num(c, "bytes"), bytes, "the sizes' sum");
        assertEquals(RegionRuns.isRun(length, max) ? count : 0, RegionRuns.runRegions(List.of(length), max));
        if (c.containsKey("sizes")) { // the plan the load makes, through RegionRuns
            RegionPlan plan = RegionPlan.plan(List.of(length), 1, Long.MAX_VALUE, 256, granule, max);
            List<Long> sizes = new ArrayList<>();
            ((List<?>) c.get("sizes")).forEach(s -> sizes.add((Long) s));
            assertEquals(sizes, plan.regionSizes(), "the plan's region sizes");
            assertEquals(count, plan.slots().get(0).regions(), "the plan's slot");
        }
        if (c.containsKey("index_of")) {
            RegionPlan.Slot slot = new RegionPlan.Slot(7, 0, length, (int) count);
            for (Object p : (List<?>) c.get("index_of")) {
                List<?> pair = (List<?>) p;
                long at = (Long) pair.get(0);
                assertEquals(((Long) pair.get(1)).intValue(), RegionRuns.indexOf(at, max), "byte " + at);
                assertEquals(7 + ((Long) pair.get(1)).intValue(), slot.regionAt(at, max), "byte " + at + ", slot");
                assertTrue(RegionRuns.start(RegionRuns.indexOf(at, max), max) <= at
                        && at < RegionRuns.end(RegionRuns.indexOf(at, max), length, max), "byte " + at + "'s region");
            }
        }
    }

    private static void find(Map<String, Object> c) {
        List<Long> list = new ArrayList<>();
        for (Object g : (List<?>) c.get("regions")) {
            List<?> pair = (List<?>) g;
            for (long i = 0; i < (Long) pair.get(1); i++) {
                list.add((Long) pair.get(0));
            }
        }
        long[] sizes = list.stream().mapToLong(Long::longValue).toArray();
        int region = (int) num(c, "region");
        long offset = num(c, "offset");
        long bytes = num(c, "bytes");
        RegionRuns.Ends ends = new RegionRuns.Ends(sizes);
        int last = ends.last(region, offset, bytes);
        assertEquals(num(c, "last"), last, "the last region");
        assertEquals(num(c, "lacking"), last < 0 ? ends.lacking(region, offset, bytes) : 0, "the bytes lacking");
        if (last >= 0 && bytes > 0) { // a client's count of a cuda-vmm host table's regions
            List<Manifest.Region> regions = new ArrayList<>();
            for (long s : sizes) {
                regions.add(new Manifest.Region(RegionKind.VMM_HOST, s, 0, -1));
            }
            Manifest.Table t = new Manifest.Table("t", "U8", new long[] {bytes}, bytes, region, offset, 0,
                    RegionKind.VMM_HOST, 0, -1);
            assertEquals(last - region + 1, Manifest.runLength(t, regions), "Manifest.runLength");
        }
    }

    private static long num(Map<String, Object> c, String key) {
        return (Long) c.get(key);
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return (Map<String, Object>) o;
    }
}
