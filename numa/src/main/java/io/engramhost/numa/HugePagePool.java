package io.engramhost.numa;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * The persistent huge page pool of one page size, on one node or system-wide: {@code nr_hugepages}
 * (reserved) and {@code free_hugepages} (not yet used).
 */
public record HugePagePool(long pageSize, long total, long free) {

    /**
     * Reads every {@code hugepages-<size>kB} folder under {@code dir} (a node's {@code hugepages} or
     * {@code sys/kernel/mm/hugepages}); an absent folder is no pools. Keyed by page size in bytes.
     */
    static Map<Long, HugePagePool> readAll(Path dir) {
        if (!Files.isDirectory(dir)) {
            return Map.of();
        }
        Map<Long, HugePagePool> pools = new TreeMap<>();
        try (Stream<Path> entries = Files.list(dir)) {
            for (Path sub : (Iterable<Path>) entries.sorted()::iterator) {
                String name = sub.getFileName().toString();
                if (!name.startsWith("hugepages-") || !name.endsWith("kB")) {
                    continue;
                }
                long size = Sysfs.parseLong(name.substring("hugepages-".length(), name.length() - 2), sub) * 1024;
                pools.put(size, new HugePagePool(size, Sysfs.readLong(sub.resolve("nr_hugepages")),
                        Sysfs.readLong(sub.resolve("free_hugepages"))));
            }
        } catch (IOException e) {
            throw new NumaException(dir + ": cannot list: " + e, e);
        }
        return Collections.unmodifiableMap(pools);
    }

    /** The sysfs folder name of this page size, e.g. {@code hugepages-2048kB}. */
    public static String dirName(long pageSize) {
        return "hugepages-" + pageSize / 1024 + "kB";
    }
}
