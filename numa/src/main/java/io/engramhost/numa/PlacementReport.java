package io.engramhost.numa;

import io.engramhost.os.Errno;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * Pages of a range by node, as {@link Placement} found them: {@code node0=512 pages (100%)}.
 *
 * @param pageSize the page size asked about
 * @param totalPages pages in the range
 * @param pagesByNode pages present on each node
 * @param notPresent pages not yet touched (-ENOENT)
 * @param errorsByErrno pages move_pages reported another error for (e.g. EFAULT), by errno
 */
public record PlacementReport(long pageSize, long totalPages, Map<Integer, Long> pagesByNode, long notPresent,
        Map<Integer, Long> errorsByErrno) {

    public PlacementReport {
        pagesByNode = Collections.unmodifiableMap(new TreeMap<>(pagesByNode));
        errorsByErrno = Collections.unmodifiableMap(new TreeMap<>(errorsByErrno));
    }

    public long pagesOn(int node) {
        return pagesByNode.getOrDefault(node, 0L);
    }

    /** The share of all pages of the range that are on {@code node}, 0 to 1. */
    public double fractionOn(int node) {
        return totalPages == 0 ? 0 : pagesOn(node) / (double) totalPages;
    }

    /** True when every page of the range is present and on {@code node}. */
    public boolean allOn(int node) {
        return totalPages > 0 && pagesOn(node) == totalPages;
    }

    public long errors() {
        return errorsByErrno.values().stream().mapToLong(Long::longValue).sum();
    }

    @Override
    public String toString() {
        List<String> parts = new ArrayList<>();
        pagesByNode.forEach((node, pages) -> parts.add("node" + node + "=" + pages + " pages (" + percent(pages) + ")"));
        if (notPresent > 0) {
            parts.add("not present=" + notPresent + " pages (" + percent(notPresent) + ")");
        }
        errorsByErrno.forEach((errno, pages) -> parts.add(Errno.name(errno) + "=" + pages + " pages (" + percent(pages) + ")"));
        return parts.isEmpty() ? "no pages" : String.join(", ", parts);
    }

    private String percent(long pages) {
        if (pages == totalPages) {
            return "100%";
        }
        String s = String.format(Locale.ROOT, "%.1f", 100.0 * pages / totalPages);
        s = s.equals("100.0") ? ">99.9" : s.equals("0.0") && pages > 0 ? "<0.1" : s;
        return (s.endsWith(".0") ? s.substring(0, s.length() - 2) : s) + "%";
    }
}
