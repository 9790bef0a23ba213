package io.engramhost.hooks;

import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;

/**
 * Points where whoever starts a daemon may step in: the daemon's context carries one of these
 * ({@code DaemonContext.hooks}), and {@link #NONE}, which does nothing, unless told otherwise. The shipped CLI always
 * uses {@link #NONE}. The test launcher ({@code bin/engram-host-test}) installs the test jar's implementation, which
 * holds the daemon at a point while a test kills it or changes its checkpoint, and stands in for GPUs that a machine
 * does not have.
 */
public interface DaemonHooks {
    /** Steps in nowhere. */
    DaemonHooks NONE = new DaemonHooks() {
    };

    /** A point of the daemon's work; each belongs to one part of it ({@link #part}) and has a short name. */
    enum Point {
        /** The load's reading session has started, before its first read. */
        LOAD_BEFORE_READ("load", "before-read"),
        /** A reading thread of the load has read one more piece (so this comes after the first). */
        LOAD_AFTER_CHUNK("load", "after-chunk"),
        /** The predecessor of a takeover has granted it, before it sends its catalog. */
        HANDOVER_ACCEPTED("handover", "accepted"),
        /** The predecessor has its successor's HANDOVER_READY, before it freezes its connections. */
        HANDOVER_READY("handover", "ready"),
        /** The predecessor has sent HANDOVER_COMMIT and waits for HANDOVER_DONE. */
        HANDOVER_COMMITTED("handover", "committed"),
        /** A successor is about to connect to the daemon it takes over from. */
        TAKEOVER_REQUEST("takeover", "request"),
        /** The successor has checked the catalog handed over, before it answers HANDOVER_READY. */
        TAKEOVER_CATALOG("takeover", "catalog"),
        /** The successor holds the commit's lock and connections, before it answers HANDOVER_DONE. */
        TAKEOVER_COMMIT("takeover", "commit");

        private final String part;
        private final String step;

        Point(String part, String step) {
            this.part = part;
            this.step = step;
        }

        /** {@code load}, {@code handover} (the predecessor's side) or {@code takeover} (the successor's). */
        public String part() {
            return part;
        }

        /** The point's name within its part: {@code before-read}, {@code accepted}... */
        public String step() {
            return step;
        }
    }

    /**
     * The daemon has reached {@code point}, on the thread doing that work. May block (holding that work); an
     * unchecked exception fails the work (a load fails, a takeover is refused).
     */
    default void reached(Point point) {
    }

    /**
     * The NUMA nodes of the GPUs, by CUDA index, that {@code --numa auto} places the tables by, instead of those of
     * the GPUs this machine has (empty: the real ones; an empty OptionalInt: a GPU whose node is unknown).
     */
    default Optional<List<OptionalInt>> gpuNumaNodes() {
        return Optional.empty();
    }
}
