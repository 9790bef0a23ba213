package io.engramhost.daemon;

import io.engramhost.os.Fd;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import java.util.List;

/**
 * What a ready daemon serves: the manifest, the fds of its regions (fd i is region i) and a
 * fingerprint check. It owns the tables' memory through {@code owner} and frees it on close.
 */
public final class Catalog implements AutoCloseable {
    /** Compares a client's expectation with the daemon's fingerprint: the differences, empty on a match. */
    public interface FingerprintCheck {
        List<String> differences(Expectation expectation);
    }

    private final Manifest manifest;
    private final List<Fd> fds;
    private final String fingerprintSha256;
    private final FingerprintCheck check;
    private final AutoCloseable owner;
    private final String backend;

    public Catalog(Manifest manifest, List<Fd> fds, String fingerprintSha256, FingerprintCheck check, String backend,
            AutoCloseable owner) {
        if (fds.size() != manifest.regions().size()) {
            throw new IllegalArgumentException(fds.size() + " fds for " + manifest.regions().size() + " regions");
        }
        this.manifest = manifest;
        this.fds = List.copyOf(fds);
        this.fingerprintSha256 = fingerprintSha256;
        this.check = check;
        this.backend = backend;
        this.owner = owner;
    }

    public Manifest manifest() {
        return manifest;
    }

    public List<Fd> fds() {
        return fds;
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
        return manifest.tables().stream().mapToLong(Manifest.Table::bytes).sum();
    }

    @Override
    public void close() throws Exception {
        owner.close();
    }
}
