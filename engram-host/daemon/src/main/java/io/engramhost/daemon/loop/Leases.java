package io.engramhost.daemon.loop;

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
public final class Leases {
    private static final System.Logger LOG = System.getLogger(Leases.class.getName());
    /** One client's lease. */
    public record Lease(long id, int pid, int uid, Instant since) {
    }

    private final ConcurrentHashMap<Long, Lease> leases = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();

    long add(int pid, int uid) {
        long id = ids.incrementAndGet();
        leases.put(id, new Lease(id, pid, uid, Instant.now()));
        LOG.log(INFO, "lease " + id + " granted to pid " + pid + " (uid " + uid + ")");
        return id;
    }

    /** A lease a predecessor daemon granted, handed over with its connection: listed again under its id. */
    void adopt(long id, int pid, int uid, Instant since) {
        leases.put(id, new Lease(id, pid, uid, since));
        ids.accumulateAndGet(id, Math::max);
    }

    /** The id the next lease will get. */
    public long nextId() {
        return ids.get() + 1;
    }

    /** Leases continue from {@code next}: ids stay unique across a handover. */
    public void continueFrom(long next) {
        ids.accumulateAndGet(next - 1, Math::max);
    }

    Lease get(long id) {
        return leases.get(id);
    }

    void end(long id, String why) {
        Lease l = leases.remove(id);
        if (l != null) {
            LOG.log(INFO, "lease " + id + " of pid " + l.pid() + " " + why);
        }
    }

    public int size() {
        return leases.size();
    }

    public List<Lease> list() {
        List<Lease> out = new ArrayList<>(leases.values());
        out.sort((a, b) -> Long.compare(a.id(), b.id()));
        return out;
    }
}
