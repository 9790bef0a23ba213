package io.engramhost.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** docs/protocol.md, "How to map a region": which memfds a client maps, checked on memfds made here. */
class SealCheckTest {
    private static final long PAGE = Posix.pageSize();
    /** What the daemon seals with. */
    private static final int ALL = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW | Posix.F_SEAL_WRITE;
    /** What builds before WRITE sealed with. */
    private static final int OLD = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW | Posix.F_SEAL_FUTURE_WRITE;

    private static Manifest manifest(long size) {
        return new Manifest(new byte[32], new byte[0], List.of(new Manifest.Region(RegionKind.MEMFD, size, -1, -1)),
                List.of(new Manifest.Table("t", "U8", new long[] {size}, size, 0, 0, 0, RegionKind.MEMFD, -1, -1)));
    }

    private static Fd memfd(long size, int seals) {
        Fd fd = Posix.memfdCreate("sealcheck", Posix.MFD_CLOEXEC | Posix.MFD_ALLOW_SEALING);
        Posix.ftruncate(fd, size);
        if (seals != 0) {
            Posix.addSeals(fd, seals);
        }
        return fd;
    }

    @Test
    void shouldAcceptEveryRequiredSealWithWriteAndFutureWriteOnlyWhenAsked() {
        for (int seals : new int[] {ALL, ALL | Posix.F_SEAL_FUTURE_WRITE}) {
            try (Fd fd = memfd(PAGE, seals)) {
                SealCheck.check(manifest(PAGE), 0, fd, false);
            }
        }
        try (Fd fd = memfd(PAGE, OLD)) { // FUTURE_WRITE, as builds before WRITE sealed
            assertThrows(EngramClientException.class, () -> SealCheck.check(manifest(PAGE), 0, fd, false));
            SealCheck.check(manifest(PAGE), 0, fd, true);
        }
        try (Fd fd = memfd(2 * PAGE, ALL)) {
            SealCheck.check(manifest(PAGE), 0, fd, false); // more bytes than the region needs: fine
        }
    }

    @Test
    void shouldNameTheSealsFoundAndThoseMissing() {
        int[] lacking = {Posix.F_SEAL_SEAL, Posix.F_SEAL_SHRINK, Posix.F_SEAL_GROW, Posix.F_SEAL_WRITE};
        String[] names = {"SEAL", "SHRINK", "GROW", "WRITE"};
        for (int i = 0; i < lacking.length; i++) {
            try (Fd fd = memfd(PAGE, ALL & ~lacking[i])) {
                EngramClientException e = assertThrows(EngramClientException.class,
                        () -> SealCheck.check(manifest(PAGE), 0, fd, true));
                assertTrue(e.getMessage().startsWith("region 0 (memfd, " + PAGE + " bytes; table t): its seals are "
                        + SealCheck.names(ALL & ~lacking[i]) + " (0x" + Integer.toHexString(ALL & ~lacking[i])
                        + "); missing " + (i == 3 ? "WRITE or FUTURE_WRITE" : names[i]) + ", so its bytes could change"),
                        e.getMessage());
            }
        }
        assertEquals("none", SealCheck.names(0));
        assertEquals("SEAL|SHRINK|GROW|WRITE|FUTURE_WRITE|0x20", SealCheck.names(0x3f));
        assertEquals("SEAL, SHRINK, GROW, WRITE", SealCheck.missing(0, false));
        assertEquals("SEAL, SHRINK, GROW, WRITE or FUTURE_WRITE", SealCheck.missing(0, true));
        int base = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW;
        assertEquals("", SealCheck.missing(base | Posix.F_SEAL_WRITE, false));
        assertEquals("WRITE (FUTURE_WRITE leaves writable a mapping made before it)",
                SealCheck.missing(base | Posix.F_SEAL_FUTURE_WRITE, false), "FUTURE_WRITE is not enough by default");
        assertEquals("", SealCheck.missing(base | Posix.F_SEAL_FUTURE_WRITE, true), "unless accepted");
    }

    @Test
    void shouldRefuseAShortMemfdAndAFileThatIsNoMemfd(@TempDir Path dir) throws Exception {
        try (Fd fd = memfd(PAGE, ALL)) {
            EngramClientException e = assertThrows(EngramClientException.class,
                    () -> SealCheck.check(manifest(2 * PAGE), 0, fd, false));
            assertTrue(e.getMessage().endsWith("the memfd holds " + PAGE + " bytes, less than the manifest's " + (2 * PAGE)
                    + "; refused"), e.getMessage());
        }
        Path file = Files.write(Files.createTempFile(Path.of("/var/tmp"), "sealcheck", ".bin"), new byte[(int) PAGE]);
        try (Fd fd = Posix.open(file, Posix.O_RDONLY | Posix.O_CLOEXEC, 0)) {
            org.junit.jupiter.api.Assumptions.assumeTrue(noSeals(fd), "/var/tmp is tmpfs here: its files have seals");
            EngramClientException e = assertThrows(EngramClientException.class,
                    () -> SealCheck.check(manifest(PAGE), 0, fd, false));
            assertTrue(e.getMessage().contains("fcntl(F_GET_SEALS) failed: EINVAL (Invalid argument): the fd is no memfd"),
                    e.getMessage());
        } finally {
            Files.delete(file);
        }
    }

    private static boolean noSeals(Fd fd) {
        try {
            Posix.getSeals(fd);
            return false;
        } catch (io.engramhost.os.NativeException e) {
            return true;
        }
    }
}
