package io.engramhost.protocol;

import io.engramhost.util.RegionRuns;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The daemon's answer to IMPORT: its fingerprint, one region per fd (fd i of the frame is region i),
 * and every table with where its bytes are. Travels with the regions' fds over SCM_RIGHTS.
 */
public record Manifest(byte[] fingerprintSha256, byte[] fingerprint, List<Region> regions, List<Table> tables) {

    /** One fd: what it is, its size in bytes, its NUMA node (-1 unknown) and GPU ordinal (-1 host). */
    public record Region(RegionKind kind, long size, int numaNode, int device) {
    }

    /**
     * One table. {@code region} is -1 for an empty table (no bytes, no fd). {@code digest} is the
     * engram digest v1 of its bytes, computed by the daemon at load.
     */
    public record Table(String name, String dtype, long[] shape, long bytes, int region, long offset, long digest,
            RegionKind kind, int numaNode, int device) {
        @Override
        public boolean equals(Object o) {
            return o instanceof Table t && name.equals(t.name) && dtype.equals(t.dtype) && Arrays.equals(shape, t.shape)
                    && bytes == t.bytes && region == t.region && offset == t.offset && digest == t.digest
                    && kind == t.kind && numaNode == t.numaNode && device == t.device;
        }

        @Override
        public int hashCode() {
            return name.hashCode() * 31 + Arrays.hashCode(shape);
        }

        @Override
        public String toString() {
            return name + " " + dtype + Arrays.toString(shape) + " " + bytes + " B @region " + region + "+" + offset;
        }
    }

    public ByteBuffer encode(int version) {
        FrameWriter w = new FrameWriter(MessageType.MANIFEST, version).raw(fingerprintSha256).blob(fingerprint);
        w.i32(regions.size());
        for (Region r : regions) {
            w.u8(r.kind().code()).i64(r.size()).i32(r.numaNode()).i32(r.device());
        }
        w.i32(tables.size());
        for (Table t : tables) {
            w.shortString(t.name()).shortString(t.dtype()).u8(t.shape().length);
            for (long d : t.shape()) {
                w.i64(d);
            }
            w.i64(t.bytes()).i32(t.region()).i64(t.offset()).i64(t.digest()).u8(t.kind().code()).i32(t.numaNode())
                    .i32(t.device());
        }
        return w.toBuffer();
    }

    /**
     * Decodes and validates: every table lies inside its region (a cuda-vmm host table, inside its run of regions),
     * every region index is in range.
     */
    public static Manifest decode(FrameReader r) {
        byte[] sha = r.raw(32, "fingerprint_sha256");
        byte[] fp = r.blob("fingerprint", ProtocolDescriptor.MAX_FINGERPRINT);
        int regionCount = r.count("region_count", ProtocolDescriptor.MAX_FDS);
        List<Region> regions = new ArrayList<>(regionCount);
        for (int i = 0; i < regionCount; i++) {
            Region region = new Region(kind(r, "region kind"), r.i64("region size"), r.i32("region numa_node"),
                    r.i32("region device"));
            if (region.size() <= 0) {
                throw new ProtocolException("MANIFEST: region " + i + " has size " + region.size());
            }
            regions.add(region);
        }
        int tableCount = r.count("table_count", ProtocolDescriptor.MAX_TABLES);
        List<Table> tables = new ArrayList<>(tableCount);
        Runs[] runs = new Runs[1]; // made for the first table over several regions
        for (int i = 0; i < tableCount; i++) {
            String name = r.shortString("table name");
            String dtype = r.shortString("table dtype");
            int rank = r.u8("table rank");
            if (rank > ProtocolDescriptor.MAX_RANK) {
                throw new ProtocolException("MANIFEST: table " + name + " has rank " + rank);
            }
            long[] shape = new long[rank];
            for (int d = 0; d < rank; d++) {
                shape[d] = r.i64("table shape");
            }
            Table t = new Table(name, dtype, shape, r.i64("table bytes"), r.i32("table region"), r.i64("table offset"),
                    r.i64("table digest"), kind(r, "table kind"), r.i32("table numa_node"),
                    r.i32("table device"));
            checkPlacement(t, regions, runs);
            tables.add(t);
        }
        r.end();
        return new Manifest(sha, fp, List.copyOf(regions), List.copyOf(tables));
    }

    /** A region kind as the wire carries it: 0 to 3 (DISK is local only, never on the wire). */
    private static RegionKind kind(FrameReader r, String field) {
        int code = r.u8(field);
        if (code == RegionKind.DISK.code()) {
            throw new ProtocolException("MANIFEST: " + field + " " + code + " is not a region kind on the wire");
        }
        return RegionKind.of(code);
    }

    private static void checkPlacement(Table t, List<Region> regions, Runs[] runs) {
        if (t.bytes() < 0 || t.offset() < 0) {
            throw new ProtocolException("MANIFEST: table " + t.name() + " has negative bytes or offset");
        }
        if (t.region() == -1) {
            if (t.bytes() != 0) {
                throw new ProtocolException("MANIFEST: table " + t.name() + " has " + t.bytes() + " bytes but no region");
            }
            return;
        }
        if (t.region() < 0 || t.region() >= regions.size()) {
            throw new ProtocolException("MANIFEST: table " + t.name() + " names region " + t.region() + " of "
                    + regions.size());
        }
        Region first = regions.get(t.region());
        long size = first.size();
        boolean spans = t.offset() <= size && t.bytes() > size - t.offset();
        if (t.offset() > size || (t.offset() == size && t.bytes() > 0)
                || spans && (t.kind() != RegionKind.VMM_HOST || first.kind() != RegionKind.VMM_HOST)) {
            throw new ProtocolException("MANIFEST: table " + t.name() + " [" + t.offset() + ", +" + t.bytes()
                    + ") lies outside its region of " + size + " bytes");
        }
        if (!spans) {
            return;
        }
        if (first.numaNode() != t.numaNode() || first.device() != t.device()) {
            throw mismatch(t, t.region(), first);
        }
        if (runs[0] == null) {
            runs[0] = new Runs(regions);
        }
        // the run's regions are found by bisection, not a walk: a lying peer's million tables over 65536 regions cost
        // no more than their count
        int last = runs[0].last(t.region(), t.offset(), t.bytes());
        int other = runs[0].other[t.region()];
        if (other < regions.size() && (last < 0 || other <= last)) {
            throw mismatch(t, other, regions.get(other));
        }
        if (last < 0) {
            throw new ProtocolException("MANIFEST: table " + t.name() + " [" + t.offset() + ", +" + t.bytes()
                    + ") runs past the last region: the run from region " + t.region() + " lacks "
                    + runs[0].lacking(t.region(), t.offset(), t.bytes()) + " bytes");
        }
    }

    private static ProtocolException mismatch(Table t, int i, Region r) {
        return new ProtocolException("MANIFEST: table " + t.name() + " says kind " + t.kind().code() + ", node "
                + t.numaNode() + ", device " + t.device() + " but region " + i + " of its run has " + r.kind().code()
                + ", " + r.numaNode() + ", " + r.device());
    }

    /**
     * The regions laid back to back, for the check of runs: their ends ({@link RegionRuns.Ends}, the one owner of
     * that arithmetic), and the first region after each whose kind, node or device differs from its own (the count
     * when none).
     */
    private static final class Runs {
        final RegionRuns.Ends ends;
        final int[] other;

        Runs(List<Region> regions) {
            int n = regions.size();
            long[] sizes = new long[n];
            for (int i = 0; i < n; i++) {
                sizes[i] = regions.get(i).size();
            }
            ends = new RegionRuns.Ends(sizes);
            other = new int[n];
            if (n > 0) {
                other[n - 1] = n;
            }
            for (int i = n - 2; i >= 0; i--) {
                Region a = regions.get(i);
                Region b = regions.get(i + 1);
                other[i] = a.kind() != b.kind() || a.numaNode() != b.numaNode() || a.device() != b.device() ? i + 1
                        : other[i + 1];
            }
        }

        int last(int region, long offset, long bytes) {
            return ends.last(region, offset, bytes);
        }

        long lacking(int region, long offset, long bytes) {
            return ends.lacking(region, offset, bytes);
        }
    }

    /**
     * How many regions {@code t} lies in: 0 for an empty table, 1 for most, more for a cuda-vmm host table over a run
     * of regions (docs/protocol.md), which are {@code t.region()} and those after it. {@code t} must have passed the
     * decode's check against these regions.
     */
    public static int runLength(Table t, List<Region> regions) {
        if (t.region() < 0) {
            return 0;
        }
        Region first = regions.get(t.region());
        if (t.bytes() <= first.size() - t.offset()) {
            return 1;
        }
        return new Runs(regions).last(t.region(), t.offset(), t.bytes()) - t.region() + 1;
    }

    /** {@link #runLength(Table, List)} in this manifest. */
    public int runLength(Table t) {
        return runLength(t, regions);
    }
}
