package io.engramhost.numa;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;

/**
 * The figures engram-host uses from {@code proc/meminfo} or {@code nodeN/meminfo}, in bytes.
 * "Available" here is {@code MemFree + Active(file) + Inactive(file)}: free memory plus the page
 * cache the kernel can drop (shmem, memfds included, is not in the file LRU lists).
 *
 * @param totalBytes MemTotal
 * @param freeBytes MemFree
 * @param fileCacheBytes Active(file) + Inactive(file), 0 where the file lacks them
 * @param defaultHugePageSize Hugepagesize (proc/meminfo only), 0 where absent
 */
public record Meminfo(long totalBytes, long freeBytes, long fileCacheBytes, long defaultHugePageSize) {

    private static final Path PROC_MEMINFO = Path.of("/proc/meminfo");

    /**
     * This machine's default huge page size (/proc/meminfo Hugepagesize): the size vm.nr_hugepages and
     * MFD_HUGETLB without a size flag use. 2 MiB on x86-64; 2 MiB, 32 MiB or 512 MiB on aarch64 (4, 16 or
     * 64 KiB base pages). 0 when the kernel has no hugetlb pages.
     */
    public static long systemDefaultHugePageSize() {
        return parse(Sysfs.read(PROC_MEMINFO), PROC_MEMINFO).defaultHugePageSize();
    }

    /** MemFree plus reclaimable file cache. */
    public long availableBytes() {
        return freeBytes + fileCacheBytes;
    }

    /** Sums of two nodes' figures (the default huge page size is kept from this one). */
    Meminfo plus(Meminfo other) {
        return new Meminfo(totalBytes + other.totalBytes, freeBytes + other.freeBytes,
                fileCacheBytes + other.fileCacheBytes, defaultHugePageSize);
    }

    /**
     * Parses lines like {@code MemFree:  123 kB} or {@code Node 1 MemFree:  123 kB}; {@code source}
     * names the file in errors. MemTotal and MemFree are required.
     */
    public static Meminfo parse(String text, Path source) {
        Map<String, Long> values = new HashMap<>();
        for (String line : text.split("\n")) {
            String l = line.strip();
            if (l.isEmpty()) {
                continue;
            }
            if (l.startsWith("Node ")) {
                int space = l.indexOf(' ', 5);
                l = space < 0 ? l : l.substring(space + 1).strip();
            }
            int colon = l.indexOf(':');
            if (colon <= 0) {
                throw new NumaException(source + ": malformed line '" + line.strip() + "'");
            }
            String[] value = l.substring(colon + 1).strip().split("\\s+");
            long n = Sysfs.parseLong(value[0], source);
            long scale = value.length > 1 && value[1].equalsIgnoreCase("kB") ? 1024 : 1;
            values.put(l.substring(0, colon), n * scale);
        }
        return new Meminfo(required(values, "MemTotal", source), required(values, "MemFree", source),
                values.getOrDefault("Active(file)", 0L) + values.getOrDefault("Inactive(file)", 0L),
                values.getOrDefault("Hugepagesize", 0L));
    }

    private static long required(Map<String, Long> values, String key, Path source) {
        Long v = values.get(key);
        if (v == null) {
            throw new NumaException(source + ": no " + key + " line");
        }
        return v;
    }
}
