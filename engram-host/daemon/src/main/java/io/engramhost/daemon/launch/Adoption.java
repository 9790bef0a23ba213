package io.engramhost.daemon.launch;

import io.engramhost.daemon.loop.HandedConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadReport;
import io.engramhost.util.Closer;
import java.util.List;
import java.util.Objects;

/**
 * Everything a daemon process starts serving with, whichever way it got it ({@code DaemonLauncher}): from systemd's
 * fd store, from a predecessor's takeover, or about to load its checkpoint. It owns all of it until
 * {@code Daemon.run} takes it over, and closes all of it if that never happens. (systemd's own part, its notify
 * socket, comes beside it: {@code Supervisor}.)
 *
 * @param lock        the socket path's lock
 * @param listener    the listening socket
 * @param catalog     the tables, ready to serve (null: {@code load} makes them)
 * @param load        what loads the tables (null: {@code catalog} is there)
 * @param connections connections a predecessor handed over, leases among them (empty: none)
 * @param nextLeaseId the id the next lease gets (leases stay unique across a takeover)
 * @param report      what is known of the tables so far: the predecessor's report and the origin, or the memory check
 */
public record Adoption(DaemonLock lock, UnixListener listener, Catalog catalog, CatalogBuilder load,
        List<HandedConnection> connections, long nextLeaseId, LoadReport report) implements AutoCloseable {

    public Adoption {
        Objects.requireNonNull(lock, "lock");
        Objects.requireNonNull(listener, "listener");
        if ((catalog == null) == (load == null)) {
            throw new IllegalArgumentException("an adoption has either a catalog or a load");
        }
        connections = List.copyOf(connections);
    }

    /** A daemon that will load {@code load}, with nothing handed over. */
    public static Adoption toLoad(DaemonLock lock, UnixListener listener, CatalogBuilder load, LoadReport report) {
        return new Adoption(lock, listener, null, load, List.of(), 1, report);
    }

    /** Closes everything it holds, in reverse order of taking; for an adoption that no daemon took. */
    @Override
    public void close() {
        Closer<AutoCloseable> c = new Closer<>();
        c.add(lock);
        c.add(listener);
        c.add(catalog);
        c.add(load);
        connections.forEach(h -> c.add(h.fd()));
        c.close();
    }
}
