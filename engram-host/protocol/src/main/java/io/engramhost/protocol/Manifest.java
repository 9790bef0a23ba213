package io.engramhost.protocol;

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

    /** Decodes and validates: every table lies inside its region, every region index is in range. */
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
            checkPlacement(t, regions);
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

    private static void checkPlacement(Table t, List<Region> regions) {
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
        long size = regions.get(t.region()).size();
        if (t.offset() > size || t.bytes() > size - t.offset()) {
            throw new ProtocolException("MANIFEST: table " + t.name() + " [" + t.offset() + ", +" + t.bytes()
                    + ") lies outside its region of " + size + " bytes");
        }
    }
}
