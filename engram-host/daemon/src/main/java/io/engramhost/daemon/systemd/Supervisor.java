package io.engramhost.daemon.systemd;

import io.engramhost.os.Fd;
import io.engramhost.util.Closer;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Objects;
import java.util.Set;

/**
 * systemd's part in a start: its notify socket, the fd store's entries a previous run left that this daemon does not
 * serve (to remove), and the catalog memfd adopted from the store (null: none), to store again once ready. It owns
 * the notifier and the memfd until {@link Daemon#run} takes them, and closes both if that never happens.
 */
public record Supervisor(SystemdNotify notifier, Set<String> staleEntries, Fd keptCatalog) implements AutoCloseable {
    public Supervisor {
        Objects.requireNonNull(notifier, "notifier");
        staleEntries = Collections.unmodifiableSet(new LinkedHashSet<>(staleEntries)); // in the order passed
    }

    /** Closes the notifier and the kept catalog memfd; for a start that no daemon took. */
    @Override
    public void close() {
        Closer.closeAll(notifier, keptCatalog);
    }
}
