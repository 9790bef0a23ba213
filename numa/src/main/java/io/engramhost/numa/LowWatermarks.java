package io.engramhost.numa;

import java.nio.file.Path;
import java.util.Collection;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * Each node's low watermark from {@code proc/zoneinfo}: the sum over its zones of the {@code low} pages, in bytes.
 * Below it the kernel reclaims before it hands out a page, and a page of {@code preferred} goes to another node; a
 * bind that needs those pages can meet the OOM killer. {@link MemoryBudget} subtracts it from MemFree + file cache.
 *
 * @param bytes the low watermark of each node that {@code proc/zoneinfo} lists, in bytes
 * @param unknown empty when read; otherwise why not ({@code proc/zoneinfo} missing, unreadable or malformed), and
 *        {@link #bytes} is empty: the budget then counts MemFree + file cache as it did before and says so
 */
record LowWatermarks(Map<Integer, Long> bytes, Optional<String> unknown) {

    LowWatermarks {
        bytes = Map.copyOf(bytes);
    }

    /** {@code file} ({@code root/proc/zoneinfo}) with {@code pageSize}-byte pages; never throws. */
    static LowWatermarks read(Path file, long pageSize) {
        Optional<String> text;
        try {
            text = Sysfs.readIfExists(file);
        } catch (NumaException e) {
            return unknown(e.getMessage());
        }
        if (text.isEmpty()) {
            return unknown(file + " is missing");
        }
        Map<Integer, Long> bytes;
        try {
            bytes = parse(text.get(), pageSize, file);
        } catch (NumaException e) {
            return unknown(e.getMessage());
        }
        return bytes.isEmpty() ? unknown(file + " lists no zones") : new LowWatermarks(bytes, Optional.empty());
    }

    private static LowWatermarks unknown(String why) {
        return new LowWatermarks(Map.of(), Optional.of(why));
    }

    /**
     * Lines {@code Node 0, zone   Normal} open a zone; of the indented lines after it only {@code low N} is read
     * (the per-CPU {@code high:} and the like have a colon and are not it). Empty when no zone is listed.
     */
    static Map<Integer, Long> parse(String text, long pageSize, Path source) {
        Map<Integer, Long> pages = new TreeMap<>();
        Integer node = null;
        for (String line : text.split("\n")) {
            String l = line.strip();
            if (l.startsWith("Node ")) {
                int comma = l.indexOf(',');
                if (comma < 0) {
                    throw new NumaException(source + ": malformed line '" + l + "'");
                }
                node = (int) Sysfs.parseLong(l.substring(5, comma), source);
                pages.putIfAbsent(node, 0L);
                continue;
            }
            String[] words = l.split("\\s+");
            if (node != null && words.length == 2 && words[0].equals("low")) {
                pages.merge(node, Sysfs.parseLong(words[1], source), Long::sum);
            }
        }
        Map<Integer, Long> bytes = new TreeMap<>();
        pages.forEach((n, p) -> bytes.put(n, Math.multiplyExact(p, pageSize)));
        return bytes;
    }

    /** The sum of {@code nodes}' low watermarks (0 for a node zoneinfo does not list); 0 when unknown. */
    long sum(Collection<Integer> nodes) {
        return nodes.stream().mapToLong(n -> bytes.getOrDefault(n, 0L)).sum();
    }

    /** The sum over every node zoneinfo lists: the machine's. */
    long total() {
        return bytes.values().stream().mapToLong(Long::longValue).sum();
    }
}
