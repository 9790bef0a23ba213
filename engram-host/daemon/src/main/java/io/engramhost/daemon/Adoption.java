package io.engramhost.daemon;

import io.engramhost.os.Fd;
import io.engramhost.os.UnixListener;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadReport;
import io.engramhost.util.Closer;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * Everything a daemon process starts serving with, whichever way it got it ({@link DaemonLauncher}): from systemd's
 * fd store, from a predecessor's takeover, or about to load its checkpoint. It owns all of it until
 * {@link Daemon#run} takes it over, and closes all of it if that never happens.
 *
 * @param lock        the socket path's lock
 * @param listener    the listening socket
 * @param catalog     the tables, ready to serve (null: {@code load} makes them)
 * @param load        what loads the tables (null: {@code catalog} is there)
 * @param connections connections a predecessor handed over, leases among them (empty: none)
 * @param nextLeaseId the id the next lease gets (leases stay unique across a takeover)
 * @param report      what is known of the tables so far: the predecessor's report and the origin, or the memory check
 * @param supervisor  systemd's part (null: not under systemd)
 */
record Adoption(DaemonLock lock, UnixListener listener, Catalog catalog, CatalogBuilder load,
        List<HandedConnection> connections, long nextLeaseId, LoadReport report, Supervisor supervisor)
        implements AutoCloseable {

    Adoption {
        Objects.requireNonNull(lock, "lock");
        Objects.requireNonNull(listener, "listener");
        if ((catalog == null) == (load == null)) {
            throw new IllegalArgumentException("an adoption has either a catalog or a load");
        }
        connections = List.copyOf(connections);
    }

    /**
     * systemd's part in a start: its notify socket, the fd store's entries a previous run left that this daemon does
     * not serve (to remove), and the catalog memfd adopted from the store (null: none), to store again once ready.
     */
    record Supervisor(SystemdNotify notifier, Set<String> staleEntries, Fd keptCatalog) {
        Supervisor {
            Objects.requireNonNull(notifier, "notifier");
            staleEntries = Collections.unmodifiableSet(new LinkedHashSet<>(staleEntries)); // in the order passed
        }
    }

    /** A daemon that will load {@code load}, with nothing handed over. */
    static Adoption toLoad(DaemonLock lock, UnixListener listener, CatalogBuilder load, LoadReport report) {
        return new Adoption(lock, listener, null, load, List.of(), 1, report, null);
    }

    Adoption supervised(Supervisor s) {
        return new Adoption(lock, listener, catalog, load, connections, nextLeaseId, report, s);
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
        if (supervisor != null) {
            c.add(supervisor.notifier());
            if (supervisor.keptCatalog() != null) {
                c.add(supervisor.keptCatalog());
            }
        }
        c.close();
    }
}
