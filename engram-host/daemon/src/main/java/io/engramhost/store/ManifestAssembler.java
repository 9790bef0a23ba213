package io.engramhost.store;

import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Manifest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Builds the manifest each client is sent: the host regions and tables, then, for a client on GPU
 * d, d's device regions and tensors, with their region indices shifted past the host regions.
 */
final class ManifestAssembler {
    private final byte[] sha;
    private final byte[] canonical;
    private final List<Manifest.Region> hostRegions = new ArrayList<>();
    private final List<Fd> hostFds = new ArrayList<>();
    private final List<Manifest.Table> hostTables = new ArrayList<>();
    private final Map<Integer, List<Manifest.Region>> deviceRegions = new TreeMap<>();
    private final Map<Integer, List<Fd>> deviceFds = new TreeMap<>();
    private final Map<Integer, List<Manifest.Table>> deviceTables = new TreeMap<>();

    ManifestAssembler(Fingerprint fingerprint) {
        this.sha = HexFormat.of().parseHex(fingerprint.sha256Hex());
        this.canonical = fingerprint.canonicalBytes();
    }

    void hostRegion(Manifest.Region region, Fd fd) {
        hostRegions.add(region);
        hostFds.add(fd);
    }

    void hostTable(Manifest.Table table) {
        hostTables.add(table);
    }

    /** Adds a region on GPU {@code device}; returns its index among that GPU's regions. */
    int deviceRegion(int device, Manifest.Region region, Fd fd) {
        deviceRegions.computeIfAbsent(device, d -> new ArrayList<>()).add(region);
        deviceFds.computeIfAbsent(device, d -> new ArrayList<>()).add(fd);
        return deviceRegions.get(device).size() - 1;
    }

    /** A device tensor whose {@code region} is an index among its GPU's regions. */
    void deviceTable(int device, Manifest.Table table) {
        deviceTables.computeIfAbsent(device, d -> new ArrayList<>()).add(table);
    }

    Map<Integer, Catalog.Served> build() {
        Map<Integer, Catalog.Served> out = new TreeMap<>();
        out.put(-1, new Catalog.Served(new Manifest(sha, canonical, hostRegions, hostTables), hostFds));
        for (int device : deviceRegions.keySet()) {
            List<Manifest.Region> regions = new ArrayList<>(hostRegions);
            regions.addAll(deviceRegions.get(device));
            List<Fd> fds = new ArrayList<>(hostFds);
            fds.addAll(deviceFds.get(device));
            List<Manifest.Table> tables = new ArrayList<>(hostTables);
            int shift = hostRegions.size();
            for (Manifest.Table t : deviceTables.getOrDefault(device, List.of())) {
                tables.add(new Manifest.Table(t.name(), t.dtype(), t.shape(), t.bytes(),
                        t.region() < 0 ? -1 : t.region() + shift, t.offset(), t.digest(), t.kind(), t.numaNode(),
                        t.device()));
            }
            out.put(device, new Catalog.Served(new Manifest(sha, canonical, regions, tables), fds));
        }
        return out;
    }
}
