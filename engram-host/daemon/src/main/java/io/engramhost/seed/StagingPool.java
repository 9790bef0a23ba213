package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * The memory a seed may hold ranges in while the region they belong to is still being created ({@code
 * --seed-staging}, docs/seeding.md): buffers of one 64 MiB chunk each ({@link ContentDigest#CHUNK}), private anonymous
 * mappings made as they are first needed, up to the budget, and used again once their chunk has been copied into
 * its region (advised {@code MADV_HUGEPAGE}, so that where transparent huge pages are on a range faults in 2 MiB
 * pages). {@link #take} never waits: with the budget spent it says so, and the stream waits for the region as it
 * would without staging. The pool owns every buffer and unmaps them all at {@link #close}; thread-safe.
 */
final class StagingPool implements AutoCloseable {
    private final long budget;
    private final List<Mapping> made = new ArrayList<>();
    private final ArrayDeque<Long> free = new ArrayDeque<>();
    private long bytesStaged;
    private boolean closed;

    /** {@code budget}: bytes in all; less than one chunk stages nothing. */
    StagingPool(long budget) {
        this.budget = budget;
    }

    /** A free buffer of one chunk's bytes, or 0 when the budget is spent (or the pool is closed). */
    synchronized long take() {
        if (closed) {
            return 0;
        }
        Long f = free.poll();
        if (f != null) {
            return f;
        }
        if ((made.size() + 1L) * ContentDigest.CHUNK > budget) {
            return 0;
        }
        Mapping m = Posix.mmapAnonymous(ContentDigest.CHUNK, "the seed's staging buffer " + (made.size() + 1));
        made.add(m);
        try { // fewer faults at the first range it takes, where transparent huge pages are on; only advice
            Posix.madvise(m, 0, ContentDigest.CHUNK, Posix.MADV_HUGEPAGE);
        } catch (RuntimeException e) {
            // THP off or not built in: 4 KiB pages, as without the advice
        }
        return m.address();
    }

    /** Gives back a buffer from {@link #take}, its bytes ({@code staged}) copied into their region or dropped. */
    synchronized void give(long buffer, long staged) {
        bytesStaged += staged;
        if (!closed) {
            free.push(buffer);
        }
    }

    /** Bytes that went through a buffer and into their region. */
    synchronized long bytesStaged() {
        return bytesStaged;
    }

    /** The buffers made so far (at most the budget over 64 MiB). */
    synchronized int buffers() {
        return made.size();
    }

    /** Unmaps every buffer; the caller has ended every stream that could use one. */
    @Override
    public synchronized void close() {
        closed = true;
        free.clear();
        RuntimeException first = null;
        for (Mapping m : made) {
            try {
                m.close();
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        made.clear();
        if (first != null) {
            throw first;
        }
    }
}
