package io.engramhost.store;

import io.engramhost.os.Fd;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What a ready daemon serves: per client GPU, a manifest and the fds of its regions (fd i is
 * region i): the host tables, plus that GPU's device tensors. Key -1 is for clients that name no
 * GPU (host tables only). It owns the tables' memory through {@code owner} and frees it on close.
 */
public final class Catalog implements AutoCloseable {
    /** Compares a client's expectation with the daemon's fingerprint: the differences, empty on a match. */
    public interface FingerprintCheck {
        List<String> differences(Expectation expectation);
    }

    /** One manifest and its fds. */
    public record Served(Manifest manifest, List<Fd> fds) {
        public Served {
            if (fds.size() != manifest.regions().size()) {
                throw new IllegalArgumentException(fds.size() + " fds for " + manifest.regions().size() + " regions");
            }
            fds = List.copyOf(fds);
        }
    }

    private final Map<Integer, Served> byDevice;
    private final String fingerprintSha256;
    private final FingerprintCheck check;
    private final AutoCloseable owner;
    private final String backend;

    public Catalog(Map<Integer, Served> byDevice, String fingerprintSha256, FingerprintCheck check, String backend,
            AutoCloseable owner) {
        if (!byDevice.containsKey(-1)) {
            throw new IllegalArgumentException("a catalog needs the host-only manifest (key -1)");
        }
        this.byDevice = new TreeMap<>(byDevice);
        this.fingerprintSha256 = fingerprintSha256;
        this.check = check;
        this.backend = backend;
        this.owner = owner;
    }

    /** A catalog of host tables only. */
    public Catalog(Manifest manifest, List<Fd> fds, String fingerprintSha256, FingerprintCheck check, String backend,
            AutoCloseable owner) {
        this(Map.of(-1, new Served(manifest, fds)), fingerprintSha256, check, backend, owner);
    }

    /** What a client on GPU {@code device} (-1: none) is sent. */
    public Served servedTo(int device) {
        return byDevice.getOrDefault(device, byDevice.get(-1));
    }

    /** Every manifest the catalog serves, by GPU (-1: host only), for a handover. */
    public Map<Integer, Served> byDevice() {
        return Collections.unmodifiableMap(byDevice);
    }

    /** The host-only manifest. */
    public Manifest manifest() {
        return byDevice.get(-1).manifest();
    }

    /** Every table: the host tables once, then each GPU's device tensors. */
    public List<Manifest.Table> allTables() {
        List<Manifest.Table> out = new ArrayList<>(manifest().tables());
        for (Map.Entry<Integer, Served> e : byDevice.entrySet()) {
            if (e.getKey() >= 0) {
                e.getValue().manifest().tables().stream().filter(t -> t.device() == e.getKey()).forEach(out::add);
            }
        }
        return out;
    }

    /** Distinct fds the daemon holds (host regions once, plus every GPU's). */
    public int regionCount() {
        int host = byDevice.get(-1).fds().size();
        int n = host;
        for (Map.Entry<Integer, Served> e : byDevice.entrySet()) {
            if (e.getKey() >= 0) {
                n += e.getValue().fds().size() - host;
            }
        }
        return n;
    }

    public String fingerprintSha256() {
        return fingerprintSha256;
    }

    public String backend() {
        return backend;
    }

    public List<String> differences(Expectation expectation) {
        return check.differences(expectation);
    }

    public long totalBytes() {
        return allTables().stream().mapToLong(Manifest.Table::bytes).sum();
    }

    @Override
    public void close() throws Exception {
        owner.close();
    }
}
