package io.engramhost.daemon;

import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.MessageType;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The clients that imported and keep their connection open as a lease. One thread watches all of
 * them with poll(2), so no worker is held by an idle lease; a BYE, EOF or anything else ends one.
 */
final class Leases implements Runnable {
    /** One client's lease. */
    record Lease(long id, UnixConnection connection, PeerCredentials peer, Instant since) {
    }

    private final ConcurrentHashMap<Long, Lease> leases = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();
    private volatile boolean running = true;

    void add(UnixConnection connection, PeerCredentials peer) {
        long id = ids.incrementAndGet();
        leases.put(id, new Lease(id, connection, peer, Instant.now()));
        DaemonLog.info("lease " + id + " granted to pid " + peer.pid() + " (uid " + peer.uid() + ")");
    }

    List<Lease> list() {
        List<Lease> out = new ArrayList<>(leases.values());
        out.sort((a, b) -> Long.compare(a.id(), b.id()));
        return out;
    }

    @Override
    public void run() {
        while (running) {
            List<Lease> snapshot = list();
            int[] fds = new int[snapshot.size()];
            for (int i = 0; i < fds.length; i++) {
                fds[i] = snapshot.get(i).connection().rawFd();
            }
            short[] revents = Posix.pollAll(fds, Posix.POLLIN, 200);
            for (int i = 0; i < fds.length; i++) {
                if (revents[i] != 0) {
                    end(snapshot.get(i));
                }
            }
        }
    }

    /** The peer sent something or hung up: either way the lease is over. */
    private void end(Lease lease) {
        String why;
        try {
            var m = lease.connection().receive(1 << 16, 0, 1000);
            FrameReader r = FrameReader.of(m.payload());
            why = r.type() == MessageType.BYE ? "released" : "ended: unexpected " + r.type() + " on a lease";
        } catch (PeerClosedException e) {
            why = "ended: client closed its connection";
        } catch (RuntimeException e) {
            why = "ended: " + e.getMessage();
        }
        leases.remove(lease.id());
        lease.connection().close();
        DaemonLog.info("lease " + lease.id() + " of pid " + lease.peer().pid() + " " + why);
    }

    /** Stops watching; call {@link #closeAll()} once the watcher thread has ended. */
    void stop() {
        running = false;
    }

    void closeAll() {
        for (Lease lease : list()) {
            leases.remove(lease.id());
            lease.connection().close();
        }
    }
}
