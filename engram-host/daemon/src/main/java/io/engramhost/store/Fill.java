package io.engramhost.store;

import io.engramhost.checkpoint.TensorInfo;
import java.util.List;
import java.util.Map;

/**
 * One stage of a host load that puts the tables' bytes into their regions as {@link RegionCreator} makes them: from
 * the peers ({@link SeedFill}), then from the disk ({@link DiskFill}), each filling what the fills before it did not.
 * A fill reports its progress to the load's {@link LoadProgress} and returns what it did; it times nothing but itself.
 */
interface Fill {
    /** What a fill works on: the load's settings, its plan, the regions as they are created, and its progress. */
    record Target(LoadSettings settings, RegionPlan plan, RegionCreator regions, LoadProgress progress) {
    }

    /**
     * What the fills did so far: the digest of each table filled (its bytes' engram digest v1), the tables whose
     * sha256-tree-v1 the disk's bytes must decide ({@link SeedFill}), and of the last fill the nanoseconds it took,
     * the bytes it filled, those read with O_DIRECT and why O_DIRECT was refused (null: it was not).
     */
    record Result(Map<TensorInfo, Long> digests, List<TensorInfo> treeCheck, long nanos, long bytes, long directBytes,
            String directRefused) {
        static final Result NONE = new Result(Map.of(), List.of(), 0, 0, 0, null);

        public Result {
            digests = Map.copyOf(digests);
            treeCheck = List.copyOf(treeCheck);
        }
    }

    /** Fills the tables {@code before} did not, as their regions come; what was filled, {@code before}'s included. */
    Result fill(Target target, Result before) throws Exception;
}
