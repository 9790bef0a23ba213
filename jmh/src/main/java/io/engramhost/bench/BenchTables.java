package io.engramhost.bench;

import io.engramhost.memfd.PageKind;
import io.engramhost.numa.NumaPolicy;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.store.Catalog;
import io.engramhost.store.HostRegion;
import io.engramhost.store.HostRegionFactory;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * A daemon catalog built by hand: {@code count} U8 tables of {@code rows x rowBytes}, each in a region of its
 * own made by the daemon's {@link HostRegionFactory} (a memfd, a hugetlb memfd or a cuda-vmm HOST_NUMA allocation), filled with
 * pseudo-random bytes on every core ({@link NativeMemory#fillRandomParallel}), sealed, and served with a real
 * SHA-256 fingerprint check. Table digests are not computed (0): no benchmark client verifies them.
 */
final class BenchTables {
    private BenchTables() {
    }

    /** The name of table {@code i}. */
    static String name(int i) {
        return "engram.layers." + i + ".embedding.weight";
    }

    /**
     * The fingerprint record this catalog serves in place of a checkpoint's structured one: its shape. Not a canonical
     * structured fingerprint (nothing here has a checkpoint), but the manifest's fingerprint_sha256 is its SHA-256, as
     * docs/protocol.md requires and the Python client checks.
     */
    static byte[] fingerprint(int count, long rows, int rowBytes) {
        return ("bench:" + count + "x" + rows + "x" + rowBytes).getBytes(StandardCharsets.UTF_8);
    }

    /** The fingerprint this catalog serves (hex: the SHA-256 of {@link #fingerprint}), so a client can expect it. */
    static String fingerprintHex(int count, long rows, int rowBytes) {
        try {
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            sha.update(fingerprint(count, rows, rowBytes));
            return HexFormat.of().formatHex(sha.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /** Tables in 4 KiB or hugetlb memfds with no NUMA policy. */
    static Catalog build(int count, long rows, int rowBytes, PageKind pages) {
        return build(count, rows, rowBytes, HostRegionFactory.memfd(pages, NumaPolicy.none()));
    }

    /** Tables in regions made as the daemon makes them, whose kind and node the manifest names. */
    static Catalog build(int count, long rows, int rowBytes, HostRegionFactory regions) {
        if (count < 1 || rows < 1 || rowBytes < 8 || rowBytes % 8 != 0) {
            throw new IllegalArgumentException("tables: need count >= 1, rows >= 1 and rowBytes a multiple of 8 >= 8;"
                    + " got " + count + " x " + rows + " x " + rowBytes);
        }
        long bytes = Math.multiplyExact(rows, (long) rowBytes);
        long granule = regions.granule();
        long size = Math.max(1, (bytes + granule - 1) / granule) * granule;
        RegionKind kind = regions.kind();
        List<HostRegion> owned = new ArrayList<>(count);
        try {
            List<Manifest.Region> rs = new ArrayList<>(count);
            List<Manifest.Table> ts = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                HostRegion r = regions.create(i, size);
                owned.add(r);
                NativeMemory.fillRandomParallel(r.address(), r.size(), 0x5eed0000L + i);
                r.seal();
                rs.add(new Manifest.Region(kind, r.size(), regions.node(), -1));
                ts.add(new Manifest.Table(name(i), "U8", new long[] {rows, rowBytes}, bytes, i, 0, 0, kind,
                        regions.node(), -1));
            }
            String hex = fingerprintHex(count, rows, rowBytes);
            byte[] sha = HexFormat.of().parseHex(hex);
            Manifest manifest = new Manifest(sha, fingerprint(count, rows, rowBytes), rs, ts);
            List<Fd> fds = owned.stream().map(HostRegion::fd).toList();
            List<HostRegion> all = List.copyOf(owned);
            return new Catalog(manifest, fds, hex, e -> differences(e, sha), kind.backend(), () -> closeAll(all));
        } catch (RuntimeException e) {
            closeAll(owned);
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

    private static void closeAll(List<HostRegion> regions) {
        for (int i = regions.size() - 1; i >= 0; i--) {
            regions.get(i).close();
        }
    }
}
