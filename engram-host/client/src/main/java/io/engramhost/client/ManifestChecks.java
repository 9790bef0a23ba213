package io.engramhost.client;

import io.engramhost.checkpoint.DType;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import io.engramhost.protocol.RegionKind;
import io.engramhost.util.Text;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

/**
 * What a client checks of a MANIFEST beyond its encoding ({@link Manifest#decode} checks the encoding, the counts and
 * that each table lies inside its region), before it trusts anything in it: the rows of docs/protocol.md's "What a
 * client checks of a MANIFEST", which the Python package checks too, in the same order and the same words. A daemon
 * that breaks one is refused, naming the table or region and what is wrong.
 */
final class ManifestChecks {
    private ManifestChecks() {
    }

    /** Refuses {@code m} unless every row holds; {@code pageSize}: the granule memfd regions come in. */
    static void check(Manifest m, long pageSize) {
        for (int i = 0; i < m.regions().size(); i++) {
            Manifest.Region r = m.regions().get(i);
            if (r.kind().memfd() && r.size() % pageSize != 0) {
                throw fail("memfd region " + i + " has size " + r.size() + ", not a whole number of " + pageSize
                        + "-byte pages");
            }
            if (r.kind() == RegionKind.VMM_DEVICE && (r.device() < 0 || r.device() > ProtocolDescriptor.MAX_DEVICE)) {
                throw fail("device region " + i + " names GPU " + r.device());
            }
            if (r.kind() != RegionKind.VMM_DEVICE && r.device() != -1) {
                throw fail("host region " + i + " names GPU " + r.device() + "; host regions carry -1");
            }
            if (r.numaNode() < -1) {
                throw fail("region " + i + " has numa_node " + r.numaNode());
            }
        }
        Set<String> names = new HashSet<>();
        for (Manifest.Table t : m.tables()) {
            if (!Text.isOneLine(t.name())) {   // the daemon refuses such names; an engine would print it
                throw fail("table '" + Text.oneLine(t.name()) + "': its name holds a control character or a line"
                        + " separator");
            }
            DType dtype;
            try {
                dtype = DType.parse(t.dtype());
            } catch (IllegalArgumentException e) {
                throw fail("table '" + t.name() + "' has dtype '" + Text.oneLine(t.dtype())
                        + "', not a safetensors dtype");
            }
            long[] shape = t.shape();
            long expected;
            try {
                expected = dtype.byteLength(shape);
            } catch (IllegalArgumentException e) {
                throw fail("table '" + t.name() + "' is " + dtype + " " + Arrays.toString(shape) + ": " + e.getMessage());
            }
            if (t.bytes() != expected) {
                throw fail("table '" + t.name() + "' is " + dtype + " " + Arrays.toString(shape) + ", which is "
                        + expected + " bytes, but the manifest says " + t.bytes());
            }
            if (!names.add(t.name())) {
                throw fail("table '" + t.name() + "' is listed twice");
            }
            if (t.region() == -1) {
                if (t.bytes() != 0 || t.offset() != 0 || t.numaNode() != -1) {
                    throw fail("table '" + t.name() + "' has no region but " + t.bytes() + " bytes at offset "
                            + t.offset() + " on node " + t.numaNode() + "; an empty table has 0, 0 and -1");
                }
                continue;
            }
            Manifest.Region r = m.regions().get(t.region());
            if (t.kind() != r.kind() || t.numaNode() != r.numaNode() || t.device() != r.device()) {
                throw fail("table '" + t.name() + "' says kind " + t.kind().code() + ", node " + t.numaNode()
                        + ", device " + t.device() + " but its region " + t.region() + " has " + r.kind().code() + ", "
                        + r.numaNode() + ", " + r.device());
            }
        }
    }

    private static ProtocolException fail(String what) {
        return new ProtocolException("MANIFEST: " + what);
    }
}
