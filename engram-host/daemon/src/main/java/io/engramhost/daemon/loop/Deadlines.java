package io.engramhost.daemon.loop;

import java.util.Comparator;
import java.util.PriorityQueue;

/**
 * The connections' deadlines in one min-heap, so that a wakeup looks at the earliest one instead of every
 * connection. A connection is filed again whenever its deadline moves ({@link #file}); the filings it had before are
 * left in the heap and skipped when they come up (each connection counts its filings), and the heap is rebuilt when
 * such stale filings outnumber the live ones. Used by the poll loop's thread only.
 */
final class Deadlines {
    private record Filing(long at, long order, Connection connection, int filing) {
    }

    private final PriorityQueue<Filing> heap = new PriorityQueue<>(
            Comparator.comparingLong(Filing::at).thenComparingLong(Filing::order));
    private long order;
    private int live;

    /** Files {@code c} under {@code at} (Long.MAX_VALUE: no deadline), unless it is filed there already. */
    void file(Connection c, long at) {
        if (c.filedDeadline == at) {
            return;
        }
        if (c.filedDeadline != Long.MAX_VALUE) {
            live--;
        }
        c.filedDeadline = at;
        c.filing++;
        if (at != Long.MAX_VALUE) {
            live++;
            heap.add(new Filing(at, order++, c, c.filing));
            if (heap.size() > 2 * live + 1024) {
                compact();
            }
        }
    }

    /** {@code c} has no deadline any more (it closed, or left the loop). */
    void remove(Connection c) {
        file(c, Long.MAX_VALUE);
    }

    /** The earliest deadline filed, or Long.MAX_VALUE when there is none. */
    long next() {
        Filing f = top();
        return f == null ? Long.MAX_VALUE : f.at();
    }

    /** The connection whose deadline is the earliest at or before {@code now}, taken off the heap; null when none. */
    Connection pollDue(long now) {
        Filing f = top();
        if (f == null || f.at() > now) {
            return null;
        }
        heap.poll();
        remove(f.connection());
        return f.connection();
    }

    /** The live filings, for tests and STATUS. */
    int size() {
        return live;
    }

    private Filing top() {
        Filing f;
        while ((f = heap.peek()) != null && f.filing() != f.connection().filing) {
            heap.poll();
        }
        return f;
    }

    private void compact() {
        Filing[] all = heap.toArray(new Filing[0]);
        heap.clear();
        for (Filing f : all) {
            if (f.filing() == f.connection().filing) {
                heap.add(f);
            }
        }
    }
}
