package io.engramhost.client;

import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.util.Closer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.function.Consumer;

/**
 * What a client imported: every table as a {@link TableView}, and every resource behind them
 * (mappings, CUDA imports, the lease). Closing unmaps everything (once the last open Chronicle view
 * is closed) and ends the lease.
 */
public final class ImportedTables implements AutoCloseable {
    /** Where the tables came from. */
    public enum Source { DAEMON, DISK }

    private final Source source;
    private final Map<String, TableView> tables;
    private final ImportTimings timings;
    private final String fingerprintSha256;
    private final ProtocolChannel lease;
    /** The protocol version chosen for the lease's connection: its BYE is encoded in it. */
    private final int leaseVersion;
    private final DaemonWatch watch;
    private final Guard guard;
    private final int daemonPid;
    private final List<RegionTimings> regionTimings;

    ImportedTables(Source source, List<TableView> views, ImportTimings timings, List<RegionTimings> regionTimings,
            String fingerprintSha256, ProtocolChannel lease, int leaseVersion, DaemonWatch watch, Guard guard,
            int daemonPid) {
        this.leaseVersion = leaseVersion;
        this.regionTimings = List.copyOf(regionTimings);
        this.source = source;
        Map<String, TableView> m = new LinkedHashMap<>();
        views.forEach(v -> m.put(v.name(), v));
        this.tables = Collections.unmodifiableMap(m);
        this.timings = timings;
        this.fingerprintSha256 = fingerprintSha256;
        this.lease = lease;
        this.watch = watch;
        this.guard = guard;
        this.daemonPid = daemonPid;
    }

    /** Builds the guard that releases {@code resources} in reverse order once nothing reads them. */
    static Guard guardFor(String what, List<AutoCloseable> resources) {
        List<AutoCloseable> inOpeningOrder = new ArrayList<>(resources);
        return new Guard(what, () -> {
            try {
                Closer.closeAll(inOpeningOrder);
            } catch (RuntimeException e) {
                IllegalStateException wrapped = new IllegalStateException("releasing " + what + ": " + e.getMessage(), e);
                for (Throwable later : e.getSuppressed()) {
                    wrapped.addSuppressed(later);
                }
                throw wrapped;
            }
        });
    }

    public Source source() {
        return source;
    }

    public Map<String, TableView> tables() {
        return tables;
    }

    public TableView table(String name) {
        TableView t = tables.get(name);
        if (t == null) {
            throw new NoSuchElementException("no table '" + name + "'; imported: " + String.join(", ", tables.keySet()));
        }
        return t;
    }

    /**
     * Where the import spent its time: native bindings, handshake, manifest, GPU preparation, the attach
     * (maps, registrations, cuda-vmm imports) and the total; {@link ImportTimings#toMap()} gives the
     * milliseconds per step under the keys {@code import --json} reports.
     */
    public ImportTimings timings() {
        return timings;
    }

    /**
     * What each attach step took for region (fd) {@code region} of the manifest: mmap and register for
     * memfd, import, map, gpu access (and cpu access) for cuda-vmm; {@link RegionTimings#NONE} for a
     * region nothing attached (a disk load, a region out of range). Tables packed in one region share it.
     */
    public RegionTimings regionTimings(int region) {
        return region < 0 || region >= regionTimings.size() ? RegionTimings.NONE : regionTimings.get(region);
    }

    public String fingerprintSha256() {
        return fingerprintSha256;
    }

    /** The daemon's pid (-1 for a disk load). */
    public int daemonPid() {
        return daemonPid;
    }

    /**
     * Calls {@code callback} once with the reason when the daemon goes (its process exits or it closes
     * the lease); at once if it is already gone. Never called for a disk load.
     */
    public void onDaemonGone(Consumer<String> callback) {
        if (watch != null) {
            watch.onGone(callback);
        }
    }

    /** Why the daemon is gone, or null while it is there. */
    public String daemonGoneReason() {
        return watch == null ? null : watch.goneReason();
    }

    public boolean isClosed() {
        return guard.isClosed();
    }

    @Override
    public void close() {
        if (guard.isClosed()) {
            return;
        }
        if (lease != null) {
            try {
                lease.send(Frames.empty(MessageType.BYE, leaseVersion));
            } catch (RuntimeException e) {
                // the daemon may be gone: the lease ends with the connection either way
            }
        }
        if (watch != null) {
            watch.stopWatching();
            if (lease != null) {
                lease.connection().shutdown(); // wakes the watcher's poll at once
            }
            watch.close();
        }
        if (lease != null) {
            lease.close();
        }
        guard.close();
    }

    static List<TableView> views(Manifest manifest, long[] regionHost, long[] regionGpu, Guard guard) {
        List<TableView> out = new ArrayList<>();
        for (Manifest.Table t : manifest.tables()) {
            long host = t.region() < 0 ? 0 : regionHost[t.region()];
            long gpu = t.region() < 0 || regionGpu == null ? 0 : regionGpu[t.region()];
            TableView v = new TableView(t, host == 0 ? 0 : host + t.offset(), guard);
            v.devicePointer(gpu == 0 ? 0 : gpu + t.offset());
            out.add(v);
        }
        return out;
    }
}
