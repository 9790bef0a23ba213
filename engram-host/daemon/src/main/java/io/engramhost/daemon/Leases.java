package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The clients that imported and keep their connection open as a lease: the registry STATUS lists.
 * The poll loop owns the connections themselves and adds and removes entries here as leases begin
 * and end (a BYE, EOF or anything else ends one at once).
 */
final class Leases {
    private static final System.Logger LOG = System.getLogger(Leases.class.getName());
    /** One client's lease. */
    record Lease(long id, int pid, int uid, Instant since) {
    }

    private final ConcurrentHashMap<Long, Lease> leases = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();

    long add(int pid, int uid) {
        long id = ids.incrementAndGet();
        leases.put(id, new Lease(id, pid, uid, Instant.now()));
        LOG.log(INFO, "lease " + id + " granted to pid " + pid + " (uid " + uid + ")");
        return id;
    }

    void end(long id, String why) {
        Lease l = leases.remove(id);
        if (l != null) {
            LOG.log(INFO, "lease " + id + " of pid " + l.pid() + " " + why);
        }
    }

    int size() {
        return leases.size();
    }

    List<Lease> list() {
        List<Lease> out = new ArrayList<>(leases.values());
        out.sort((a, b) -> Long.compare(a.id(), b.id()));
        return out;
    }
}
