package io.engramhost.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.RegionKind;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The checkpoint module's limits are the protocol's (the checkpoint module does not see the protocol, this
 * module sees both), and the manifest bound they check is an upper bound of the manifest the daemon sends.
 */
class LimitsMatchProtocolTest {
    @Test
    void shouldBeTheProtocolsConstants() {
        assertEquals(ProtocolDescriptor.MAX_SHORT_STRING, Limits.MAX_NAME_BYTES);
        assertEquals(ProtocolDescriptor.MAX_RANK, Limits.MAX_RANK);
        assertEquals(ProtocolDescriptor.MAX_TABLES, Limits.MAX_TABLES);
        assertEquals(ProtocolDescriptor.MAX_FINGERPRINT, Limits.MAX_FINGERPRINT_BYTES);
        assertEquals(ProtocolDescriptor.MAX_FRAME, Limits.MAX_MANIFEST_BYTES);
        assertEquals(ProtocolDescriptor.MAX_FDS, Limits.MAX_REGIONS);
    }

    @Test
    void shouldBoundTheEncodedManifestFromAbove() {
        Random rnd = new Random(5);
        List<TensorInfo> tensors = new ArrayList<>();
        List<Manifest.Table> tables = new ArrayList<>();
        List<Manifest.Region> regions = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            int rank = rnd.nextInt(17);
            long[] shape = new long[rank];
            java.util.Arrays.fill(shape, 1);
            if (i % 10 == 0 && rank > 0) {
                shape[0] = 0;
            }
            String name = "t" + i + "é".repeat(rnd.nextInt(2048));
            DType dtype = DType.values()[rnd.nextInt(DType.values().length)];
            if (dtype.bits() < 8 && rank > 0 && shape[0] != 0) {
                shape[0] = 8;
            } else if (dtype.bits() < 8) {
                dtype = DType.U8;
            }
            TensorInfo t = new TensorInfo(name, dtype, shape, Path.of("/x/m.safetensors"), 8, dtype.byteLength(shape));
            tensors.add(t);
            int region = t.length() == 0 ? -1 : regions.size();
            if (region >= 0) {
                regions.add(new Manifest.Region(RegionKind.MEMFD, 4096, 0, -1));
            }
            tables.add(new Manifest.Table(name, dtype.name(), shape, t.length(), region, 0, 1, RegionKind.MEMFD, 0, -1));
        }
        Fingerprint fp = new Fingerprint(Fingerprint.LAYOUT_VERSION, "memfd", List.of(), List.of(),
                tensors.stream().map(Fingerprint.Table::of).toList());
        byte[] fpBytes = fp.canonicalBytes();
        int encoded = new Manifest(new byte[32], fpBytes, regions, tables).encode(ProtocolDescriptor.MAX_VERSION)
                .remaining();
        long bound = Limits.manifestBytesBound(tensors, fpBytes.length);
        assertTrue(encoded <= bound, "encoded " + encoded + " <= bound " + bound);
        assertTrue(bound - encoded < 64, "and tight: " + (bound - encoded) + " bytes over");
    }
}
