package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Each limit at its boundary: exactly at it passes, one over fails with one line naming it. */
class LimitsTest {
    static final Path FILE = Path.of("/x/m.safetensors");

    static TensorInfo tensor(String name, long... shape) {
        return new TensorInfo(name, DType.U8, shape, FILE, 8, DType.U8.byteLength(shape));
    }

    static Fingerprint fingerprint(List<TensorInfo> tables) {
        return new Fingerprint(Fingerprint.LAYOUT_VERSION, "", List.of(), List.of(new Fingerprint.FileEntry(
                "m.safetensors", 1, "0".repeat(64))), tables.stream().map(Fingerprint.Table::of).toList());
    }

    static void check(List<TensorInfo> tables) {
        Limits.check(tables, fingerprint(tables));
    }

    static String refused(List<TensorInfo> tables) {
        String m = assertThrows(CheckpointException.class, () -> check(tables)).getMessage();
        assertEquals(1, m.lines().count(), m);
        assertTrue(m.endsWith("(docs/checkpoints.md, Limits)"), m);
        return m;
    }

    /** A name of exactly {@code bytes} bytes of UTF-8, mostly two-byte characters (bytes, not characters, count). */
    static String nameOfBytes(int bytes) {
        String s = "é".repeat(bytes / 2) + (bytes % 2 == 1 ? "a" : "");
        assertEquals(bytes, s.getBytes(StandardCharsets.UTF_8).length);
        return s;
    }

    @Test
    void shouldAllowANameOfExactly4096BytesAndRefuse4097() {
        assertDoesNotThrow(() -> check(List.of(tensor(nameOfBytes(4096), 1))));
        String m = refused(List.of(tensor(nameOfBytes(4097), 1)));
        assertTrue(m.startsWith(FILE + ": tensor '" + "é".repeat(64) + "...' (2049 characters): the name is 4097 bytes"
                + " of UTF-8, over the limit of 4096"), m);
    }

    @Test
    void shouldAllowRank16AndRefuseRank17() {
        long[] sixteen = new long[16];
        Arrays.fill(sixteen, 1);
        assertDoesNotThrow(() -> check(List.of(tensor("r16", sixteen))));
        long[] seventeen = new long[17];
        Arrays.fill(seventeen, 1);
        assertEquals(FILE + ": tensor 'r17': rank 17 (U8 " + Arrays.toString(seventeen) + ") is over the limit of 16"
                + " (docs/checkpoints.md, Limits)", refused(List.of(tensor("r17", seventeen))));
        long[] zero = {};
        assertDoesNotThrow(() -> check(List.of(tensor("scalar", zero))));
    }

    @Test
    void shouldAllow1048576TablesAndRefuseOneMore() {
        assertDoesNotThrow(() -> Limits.checkTableCount(1 << 20));
        CheckpointException e = assertThrows(CheckpointException.class, () -> Limits.checkTableCount((1 << 20) + 1));
        assertEquals("1048577 tables selected, over the limit of 1048576 (docs/checkpoints.md, Limits)", e.getMessage());
        List<TensorInfo> many = new ArrayList<>();
        for (int i = 0; i <= 1 << 20; i++) {
            many.add(tensor("t" + i, 0));
        }
        CheckpointException first = assertThrows(CheckpointException.class,
                () -> Limits.check(many, fingerprint(List.of())));
        assertTrue(first.getMessage().startsWith("1048577 tables selected"), "the count is checked first");
    }

    /**
     * Tables whose canonical fingerprint is exactly {@code bytes} long. A U8 table of rank 1 adds
     * 4 + name + 4 + 2 + 4 + 8 + 8 = 30 + name bytes; names of 4000 bytes, and the last one pads.
     */
    static List<TensorInfo> fingerprintOf(long bytes) {
        long base = fingerprint(List.of()).canonicalBytes().length;
        long n = (bytes - base - 31) / 4030;
        List<TensorInfo> tables = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String name = String.format("t%07d.", i);
            tables.add(tensor(name + "p".repeat(4000 - name.length()), 1));
        }
        int last = (int) (bytes - base - n * 4030 - 30);
        tables.add(tensor("z" + "q".repeat(last - 1), 1));
        assertEquals(bytes, fingerprint(tables).canonicalBytes().length);
        return tables;
    }

    @Test
    void shouldAllowAFingerprintOfExactly16MiBAndRefuseOneByteMore() {
        assertDoesNotThrow(() -> check(fingerprintOf(16 << 20)));
        String m = refused(fingerprintOf((16 << 20) + 1));
        assertTrue(m.contains("is 16777217 bytes, over the limit of 16777216 (16 MiB)"), m);
    }

    @Test
    void shouldBoundTheManifestAt1GiB() {
        assertDoesNotThrow(() -> Limits.checkManifestBytes(1L << 30, 1));
        CheckpointException e = assertThrows(CheckpointException.class,
                () -> Limits.checkManifestBytes((1L << 30) + 1, 7));
        assertTrue(e.getMessage().startsWith("the manifest of the 7 selected tables could take 1073741825 bytes, over"
                + " the limit of 1073741824"), e.getMessage());
        List<TensorInfo> t = List.of(tensor("ab", 2, 3), tensor("empty", 0));
        long expected = Limits.MANIFEST_FIXED_BYTES + 100
                + Limits.MANIFEST_REGION_BYTES + Limits.MANIFEST_TABLE_BYTES + 2 + 2 + 16
                + Limits.MANIFEST_TABLE_BYTES + 5 + 2 + 8;
        assertEquals(expected, Limits.manifestBytesBound(t, 100), "an empty table has no region");
        assertEquals(expected, Limits.manifestBytesBound(t, 100, 1), "one region: as many as the non-empty tables");
        assertEquals(expected + 9 * Limits.MANIFEST_REGION_BYTES, Limits.manifestBytesBound(t, 100, 10),
                "a table over a run of 10 regions: 9 more");
    }

    @Test
    void shouldCheckTheFingerprintServeWouldMakeWithItsBackendAndPatterns(@org.junit.jupiter.api.io.TempDir Path dir)
            throws Exception {
        Path file = new SafetensorsWriter().add("ab", DType.U8, new long[] {1}, new byte[] {1})
                .add("cd", DType.U8, new long[] {1}, new byte[] {2}).write(dir.resolve("m.safetensors"));
        Checkpoint cp = Checkpoint.open(file);
        Fingerprint served = Limits.checkServed(cp, List.of("a*"), "cuda-vmm");
        assertEquals(Fingerprint.of(cp, List.of("a*"), "cuda-vmm", Fingerprint.LAYOUT_VERSION), served);
        assertEquals(List.of("ab"), served.tables().stream().map(Fingerprint.Table::name).toList());
        assertEquals(Fingerprint.of(cp, List.of(), "memfd", Fingerprint.LAYOUT_VERSION).canonicalBytes().length + 3,
                Limits.checkServed(cp, List.of(), "cuda-vmm").canonicalBytes().length,
                "the backend's name is part of the fingerprint, so of its limit");
    }

    @Test
    void shouldCheckWhatTheServedSelectionSelectsWithItsIdentity(@TempDir Path dir) throws Exception {
        long[] rank17 = new long[17];
        Arrays.fill(rank17, 1);
        Path file = new SafetensorsWriter().add("ab", DType.U8, new long[] {1}, new byte[] {1})
                .add("r17", DType.U8, rank17, new byte[] {2}).write(dir.resolve("m.safetensors"));
        Checkpoint cp = Checkpoint.open(file);
        assertEquals(file + ": tensor 'r17': rank 17 (U8 " + Arrays.toString(rank17) + ") is over the limit of"
                + " 16 (docs/checkpoints.md, Limits)", assertThrows(CheckpointException.class,
                        () -> ServedSelection.of(cp, List.of(), "memfd")).getMessage(), "every tensor: r17 too");
        ServedSelection ab = ServedSelection.of(cp, List.of("ab"), "memfd");
        assertEquals(Limits.checkServed(cp, List.of("ab"), "memfd"), ab.fingerprint(), "no identity: as before");
        try (OpenCheckpoint open = OpenCheckpoint.open(file)) {
            DigestSidecar.writeRecord(DigestSidecar.locationFor(file), DigestSidecar.computeRecord(open,
                    List.of(cp.tensor("ab")), 1, x -> { }));
        }
        ServedSelection known = ServedSelection.of(cp, List.of("ab"), "memfd");
        assertEquals(ab.fingerprint().canonicalBytes().length + 1 + (1 + 8 + 32), known.fingerprint().canonicalBytes()
                .length, "version 2: a content byte per file, the identity byte and both digests per table");
    }

    @Test
    void shouldRefuseMoreRegionsThanOneManifestCarries() {
        assertDoesNotThrow(() -> Limits.checkRegions(65536));
        CheckpointException e = assertThrows(CheckpointException.class, () -> Limits.checkRegions(65537));
        assertEquals("the tables need 65537 regions (fds), over the limit of 65536 in one manifest: serve fewer tables"
                + " (--tables), or with --backend cuda-vmm a larger --region-max (docs/checkpoints.md, Limits)",
                e.getMessage());
    }
}
