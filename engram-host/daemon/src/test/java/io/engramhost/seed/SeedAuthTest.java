package io.engramhost.seed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The key file's checks, the proofs' binding to role, nonces and ids, and the MANIFEST codec's strictness. */
class SeedAuthTest {
    @Test
    void shouldReadTheFilesBytesAndTellTwoKeysApart(@TempDir Path dir) throws Exception {
        Path a = dir.resolve("a");
        Path b = dir.resolve("b");
        Files.write(a, SeedAuth.random(32));
        Files.write(b, SeedAuth.random(48));
        for (Path p : List.of(a, b)) {
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rw-------"));
        }
        SeedKey ka = SeedKey.read(a);
        assertArrayEquals(Files.readAllBytes(a), ka.bytes(), "the key is the file's bytes");
        byte[] cn = SeedAuth.random(32);
        byte[] sn = SeedAuth.random(32);
        byte[] ci = SeedAuth.random(16);
        byte[] si = SeedAuth.random(16);
        byte[] p = SeedAuth.serverProof(ka, cn, sn, ci, si);
        assertTrue(SeedAuth.same(p, SeedAuth.serverProof(SeedKey.read(a), cn, sn, ci, si)));
        assertFalse(SeedAuth.same(p, SeedAuth.serverProof(SeedKey.read(b), cn, sn, ci, si)), "another key");
        assertFalse(SeedAuth.same(p, SeedAuth.clientProof(ka, cn, sn, ci, si)), "the other role");
        assertFalse(SeedAuth.same(p, SeedAuth.serverProof(ka, sn, cn, ci, si)), "nonces swapped");
        assertFalse(SeedAuth.same(p, SeedAuth.serverProof(ka, cn, sn, si, ci)), "ids swapped");
    }

    @Test
    void shouldWarmWithoutChangingAnyProof() {
        SeedKey key = SeedKey.of(SeedAuth.random(32));
        byte[] n = SeedAuth.random(32);
        byte[] id = SeedAuth.random(16);
        byte[] before = SeedAuth.serverProof(key, n, n, id, id);
        SeedAuth.warm(key);
        assertArrayEquals(before, SeedAuth.serverProof(key, n, n, id, id), "a proof depends on its inputs alone");
    }

    @Test
    void shouldRefuseAKeyFileOthersMayRead(@TempDir Path dir) throws Exception {
        Path a = dir.resolve("a");
        Files.write(a, SeedAuth.random(32));
        Files.setPosixFilePermissions(a, PosixFilePermissions.fromString("rw-r-----"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SeedKey.read(a));
        assertEquals("--seed-key " + a + ": mode 0640 lets others than its owner at it: chmod 600 " + a,
                e.getMessage());
    }

    @Test
    void shouldDecodeAManifestStrictly() {
        var m = SeedWire.manifest(new byte[32], List.of(new SeedWire.Table("t", 10, 7)));
        m.position(SeedWire.HEADER);
        SeedWire.Manifest back = SeedWire.readManifest(m.slice());
        assertEquals(List.of(new SeedWire.Table("t", 10, 7)), back.tables());
        var cut = SeedWire.manifest(new byte[32], List.of(new SeedWire.Table("t", 10, 7)));
        cut.position(SeedWire.HEADER).limit(cut.limit() - 1);
        assertThrows(IllegalArgumentException.class, () -> SeedWire.readManifest(cut.slice()));
    }
}
