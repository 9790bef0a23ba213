package io.engramhost.bench;

import io.engramhost.daemon.Catalog;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * A daemon catalog built by hand: {@code count} U8 tables of {@code rows x rowBytes}, each in a
 * sealed memfd of its own filled with pseudo-random bytes, and a real SHA-256 fingerprint check.
 */
final class MemfdTables {
    private MemfdTables() {
    }

    /** The name of table {@code i}. */
    static String name(int i) {
        return "engram.layers." + i + ".embedding.weight";
    }

    /** The fingerprint this catalog serves (hex), derived from its shape so a client can expect it. */
    static String fingerprintHex(int count, long rows, int rowBytes) {
        try {
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            sha.update(("bench:" + count + "x" + rows + "x" + rowBytes).getBytes(java.nio.charset.StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(sha.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    static Catalog build(int count, long rows, int rowBytes, PageKind pages) {
        if (count < 1 || rows < 1 || rowBytes < 8 || rowBytes % 8 != 0) {
            throw new IllegalArgumentException("tables: need count >= 1, rows >= 1 and rowBytes a multiple of 8 >= 8;"
                    + " got " + count + " x " + rows + " x " + rowBytes);
        }
        long bytes = Math.multiplyExact(rows, (long) rowBytes);
        long size = pages.roundUp(bytes);
        List<MemfdRegion> regions = new ArrayList<>(count);
        try {
            List<Manifest.Region> rs = new ArrayList<>(count);
            List<Manifest.Table> ts = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                MemfdRegion r = MemfdRegion.create("engram.bench." + i, size, pages, null);
                regions.add(r);
                NativeMemory.fillRandom(r.writable().address(), size, 0x5eed0000L + i);
                r.seal();
                RegionKind kind = pages.hugetlb() ? RegionKind.MEMFD_HUGETLB : RegionKind.MEMFD;
                rs.add(new Manifest.Region(kind, size, -1, -1));
                ts.add(new Manifest.Table(name(i), "U8", new long[] {rows, rowBytes}, bytes, i, 0, 0, kind, -1, -1));
            }
            String hex = fingerprintHex(count, rows, rowBytes);
            byte[] sha = HexFormat.of().parseHex(hex);
            Manifest manifest = new Manifest(sha, new byte[0], rs, ts);
            List<Fd> fds = regions.stream().map(MemfdRegion::fd).toList();
            List<MemfdRegion> owned = List.copyOf(regions);
            return new Catalog(manifest, fds, hex, e -> differences(e, sha), "memfd", () -> closeAll(owned));
        } catch (RuntimeException e) {
            closeAll(regions);
            throw e;
        }
    }

    private static List<String> differences(Expectation e, byte[] sha) {
        return switch (e.kind()) {
            case ANY -> List.of();
            case SHA256 -> Arrays.equals(e.bytes(), sha) ? List.of()
                    : List.of("fingerprint sha256: expected " + HexFormat.of().formatHex(e.bytes()) + ", serving "
                            + HexFormat.of().formatHex(sha));
            case STRUCTURED -> List.of("structured fingerprints are not served by the benchmark catalog");
        };
    }

    private static void closeAll(List<MemfdRegion> regions) {
        for (int i = regions.size() - 1; i >= 0; i--) {
            regions.get(i).close();
        }
    }
}
