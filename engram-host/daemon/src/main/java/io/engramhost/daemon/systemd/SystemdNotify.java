package io.engramhost.daemon.systemd;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.daemon.handover.CatalogFrame;
import io.engramhost.os.DirFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.FdRef;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixSockets;
import io.engramhost.store.Catalog;
import io.engramhost.store.LoadReport;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;
import io.engramhost.util.Threads;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * systemd's notify protocol (sd_notify(3), docs/first-deploy.md, "Under systemd"), spoken when {@code NOTIFY_SOCKET} is set:
 * READY=1, STATUS=, STOPPING=1, WATCHDOG=1, and the fd store. What the daemon stores, each under its own
 * {@code FDNAME=} (systemd gives one name to every fd of a message and keeps no order within one, so each name
 * travels in a datagram of its own; no datagram carries more than 253 fds):
 * <ul>
 * <li>{@value #LISTEN_NAME}: the listening socket (polled by systemd, which drops it on an error);</li>
 * <li>{@value #REGION_PREFIX}{@code <i>}: region fd {@code i} of the catalog (a memfd, or a CUDA shareable handle),
 * {@code FDPOLL=0};</li>
 * <li>{@value #CATALOG_NAME}: a memfd holding the catalog as HANDOVER_CATALOG encodes it (with its checksum),
 * sealed against any change, {@code FDPOLL=0}.</li>
 * </ul>
 * Sending never waits: the socket is written without blocking, so a systemd that does not read its notify socket
 * holds up neither the load, nor the loop, nor serving. What the socket does not take at once waits in a queue that
 * a thread of its own ({@code engram-notify}) sends, in order, as soon as it can: STATUS= lines are coalesced (the
 * newest stands for those before it) and WATCHDOG=1 pings too; READY=1, STOPPING=1, the fd store's FDSTORE and
 * FDSTOREREMOVE messages are retried until they go, never dropped (a queued message holds copies of its fds). The
 * log says so once. Any other failure is logged once and the daemon serves on (systemd, not the daemon, decides what
 * a missing READY=1 or WATCHDOG=1 means).
 */
public final class SystemdNotify implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(SystemdNotify.class.getName());
    public static final String LISTEN_NAME = "engram-listen";
    public static final String CATALOG_NAME = "engram-catalog";
    public static final String REGION_PREFIX = "engram-region-";
    /** The seals of the catalog memfd: nothing may change it, and no seal may be added or removed. */
    public static final int CATALOG_SEALS = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW
            | Posix.F_SEAL_WRITE;
    /** The fds a catalog needs in the store besides its regions: the catalog memfd and the listening socket. */
    public static final int FIXED_FDS = 2;
    private static final int[] NO_FDS = new int[0];

    private final String address;
    private final Fd socket;
    private final Integer fdStoreMax;
    private final long watchdogMicros;
    private volatile boolean failed;
    private volatile boolean listenerStored;
    private volatile Thread watchdog;
    /** Messages the socket did not take at once, oldest first; each owns copies of its fds. */
    private final ArrayDeque<Pending> queue = new ArrayDeque<>();
    private Thread sender;
    private boolean backlogSaid;
    private boolean closing;

    /** How long {@link #close} goes on sending what is queued (STOPPING=1 among it) before it gives up. */
    private static final long CLOSE_FLUSH_MILLIS = 1000;

    /** A message waiting to be sent; {@code coalesce}: STATUS or WATCHDOG, replaced by a newer one of its kind. */
    private record Pending(String state, List<Fd> fds, String coalesce) {
    }

    private SystemdNotify(String address, Integer fdStoreMax, long watchdogMicros) {
        this.address = address;
        this.fdStoreMax = fdStoreMax;
        this.watchdogMicros = watchdogMicros;
        this.socket = UnixSockets.datagram("notify socket " + address);
    }

    /**
     * The notifier {@code env} asks for, or null when {@code NOTIFY_SOCKET} is unset (not under systemd's
     * Type=notify). Reads {@code FDSTORE} (the unit's FileDescriptorStoreMax=, exported by systemd 254 and later),
     * {@code WATCHDOG_USEC} and {@code WATCHDOG_PID} (the watchdog is this process's only when it names its pid).
     */
    public static SystemdNotify fromEnvironment(Map<String, String> env) {
        String address = env.get("NOTIFY_SOCKET");
        if (address == null || address.isEmpty()) {
            return null;
        }
        if (!address.startsWith("/") && !address.startsWith("@")) {
            LOG.log(WARNING, "NOTIFY_SOCKET=" + address + " is neither a path nor an abstract name (@...): not"
                    + " notifying systemd");
            return null;
        }
        Integer max = null;
        String fdStore = env.get("FDSTORE");
        if (fdStore != null && !fdStore.isEmpty()) {
            try {
                max = Integer.parseInt(fdStore.trim());
            } catch (NumberFormatException e) {
                throw new IllegalStateException("FDSTORE=" + fdStore + " is not a number (systemd sets it to the unit's"
                        + " FileDescriptorStoreMax=)");
            }
        }
        long watchdog = 0;
        String usec = env.get("WATCHDOG_USEC");
        String wpid = env.get("WATCHDOG_PID");
        if (usec != null && !usec.isEmpty() && (wpid == null || wpid.equals(String.valueOf(Posix.getpid())))) {
            try {
                watchdog = Long.parseLong(usec.trim());
            } catch (NumberFormatException e) {
                LOG.log(WARNING, "WATCHDOG_USEC=" + usec + " is not a number: not sending WATCHDOG=1");
            }
        }
        return new SystemdNotify(address, max, Math.max(0, watchdog));
    }

    /**
     * Checks, before anything is loaded or adopted, that the unit's fd store can keep {@code regions} region fds
     * and the {@value #FIXED_FDS} others.
     *
     * @throws IllegalStateException (one line) when {@code $FDSTORE} is smaller
     */
    public void checkFdStore(int regions) {
        int need = regions + FIXED_FDS;
        if (fdStoreMax == null) {
            LOG.log(WARNING, "NOTIFY_SOCKET is set but FDSTORE is not (FileDescriptorStoreMax=0, or systemd older than"
                    + " 254, which does not export it): unless the unit has an fd store of at least " + need
                    + " fds, the tables will not survive a restart of the daemon");
        } else if (fdStoreMax < need) {
            throw new IllegalStateException("the unit's fd store holds " + fdStoreMax + " fds (FDSTORE, from"
                    + " FileDescriptorStoreMax=), but keeping these tables across a restart needs " + need + " ("
                    + regions + " regions, the catalog and the listening socket): raise FileDescriptorStoreMax= to at"
                    + " least " + need);
        }
    }

    /**
     * A daemon is ready with {@code c}: its region fds and the catalog into the fd store ({@code kept}, the catalog
     * memfd adopted from the store, is stored again and then closed; null: a new one is made), then READY=1 with a
     * STATUS= line saying how the tables came.
     */
    public void announceReady(Catalog c, LoadReport report, Fd kept) {
        try {
            storeCatalog(CatalogFrame.of(c, report.encode()), kept);
        } finally {
            Closer.closeAll(kept);
        }
        ready("ready (" + (report.origin() == null ? "load" : report.origin().how().wireName()) + "): "
                + c.allTables().size() + " tables, " + Bytes.format(c.totalBytes()) + " in " + c.regionCount()
                + " regions; fingerprint " + c.fingerprintSha256());
    }

    /** READY=1 with a STATUS= line. */
    public void ready(String status) {
        send("READY=1\nSTATUS=" + oneLine(status), NO_FDS);
    }

    public void status(String status) {
        send("STATUS=" + oneLine(status), NO_FDS, List.of(), "STATUS");
    }

    public void stopping(String status) {
        send("STOPPING=1\nSTATUS=" + oneLine(status), NO_FDS);
    }

    /** The listening socket into the fd store: from here on a restart keeps the clients that wait in its backlog. */
    public void storeListener(FdRef listener) {
        store(LISTEN_NAME, List.of(listener), true);
        listenerStored = true;
    }

    /** Whether the listening socket went to the fd store: the socket file then stays when the daemon stops. */
    public boolean listenerStored() {
        return listenerStored;
    }

    /**
     * Every region fd of {@code encoded}, then the catalog, into the fd store: {@code kept} (the catalog memfd
     * adopted from the store, the same fd again) or else a new sealed memfd with the frame. Entries of the
     * same fd are kept once by systemd, so storing adopted fds again changes nothing; names a previous run stored
     * that no longer hold these tables were removed before (when the daemon began serving).
     */
    void storeCatalog(CatalogFrame encoded, Fd kept) {
        for (int i = 0; i < encoded.regionFds().size(); i++) {
            store(REGION_PREFIX + i, List.of(encoded.regionFds().get(i)), false);
        }
        if (kept != null) {
            store(CATALOG_NAME, List.of(kept), false);
        } else {
            try (Fd memfd = catalogMemfd(encoded.frame())) {
                store(CATALOG_NAME, List.of(memfd), false);
            }
        }
        LOG.log(INFO, "fd store: " + encoded.regionFds().size() + " region fds, the catalog and the listening socket"
                + " are kept by systemd across a restart");
    }

    /** FDSTOREREMOVE=1 for every entry named {@code name}. */
    public void remove(String name) {
        send("FDSTOREREMOVE=1\nFDNAME=" + name, NO_FDS);
    }

    /**
     * Sends WATCHDOG=1 every WATCHDOG_USEC/2 from a thread of the daemon's while its session loop goes round
     * ({@code heartbeat}: when it last did; it does at least once a second); a loop that stopped going round gets no
     * ping, so systemd restarts the unit.
     */
    public void startWatchdog(Threads threads, LongSupplier heartbeat) {
        if (watchdogMicros <= 0 || watchdog != null) {
            return;
        }
        long periodMillis = Math.max(1, watchdogMicros / 2000);
        long staleNanos = watchdogMicros * 1000 + 1_000_000_000L;
        Thread t = threads.thread(() -> {
            boolean quiet = false;
            try {
                while (true) {
                    if (System.nanoTime() - heartbeat.getAsLong() < staleNanos) {
                        send("WATCHDOG=1", NO_FDS, List.of(), "WATCHDOG");
                        quiet = false;
                    } else if (!quiet) {
                        quiet = true;
                        LOG.log(WARNING, "the session loop has not gone round for "
                                + (System.nanoTime() - heartbeat.getAsLong()) / 1_000_000 + " ms: WATCHDOG=1 withheld");
                    }
                    Thread.sleep(periodMillis);
                }
            } catch (InterruptedException stop) {
                // the daemon is stopping
            }
        }, "engram-watchdog");
        watchdog = t;
        t.start();
        LOG.log(INFO, "systemd watchdog: WATCHDOG=1 every " + periodMillis + " ms");
    }

    /** One name's fds, in datagrams of at most 253 fds each ({@link FdMessages#batches}: no header, no fillers). */
    private void store(String name, List<? extends FdRef> fds, boolean poll) {
        String head = "FDSTORE=1\nFDNAME=" + name + (poll ? "" : "\nFDPOLL=0");
        for (int at = 0; at < fds.size(); at += FdMessages.MAX_FDS_PER_SENDMSG) {
            List<? extends FdRef> batch = fds.subList(at, Math.min(fds.size(), at + FdMessages.MAX_FDS_PER_SENDMSG));
            send(head, FdMessages.raw(batch), batch, null);
        }
    }

    private void send(String state, int[] fds) {
        send(state, fds, List.of(), null);
    }

    /**
     * Sends {@code state} with {@code fds} (raw numbers of {@code refs}) now if the socket takes it and nothing is
     * queued before it; otherwise queues it for the sender thread, with copies of the fds.
     */
    private void send(String state, int[] fds, List<? extends FdRef> refs, String coalesce) {
        synchronized (queue) {
            if (queue.isEmpty() && !closing && trySend(state, fds)) {
                return;
            }
            if (coalesce != null) {
                queue.removeIf(p -> {
                    boolean same = coalesce.equals(p.coalesce());
                    if (same) {
                        p.fds().forEach(Fd::close);
                    }
                    return same;
                });
            }
            List<Fd> copies = new ArrayList<>();
            for (FdRef r : refs) {
                copies.add(Posix.dup(r));
            }
            queue.add(new Pending(state, copies, coalesce));
            if (!backlogSaid) {
                backlogSaid = true;
                LOG.log(WARNING, "systemd is not reading its notify socket " + address + " (its queue is full): the"
                        + " daemon serves on; STATUS= lines are coalesced, and READY=1, STOPPING=1, WATCHDOG=1 and the"
                        + " fd store's messages are sent, in order, once it reads again");
            }
            if (sender == null) {
                sender = new Thread(this::drain, "engram-notify");
                sender.setDaemon(true);
                sender.start();
            }
            queue.notifyAll();
        }
    }

    /** One datagram without waiting: true once it went, or failed for good (logged once); false while the queue is full. */
    private boolean trySend(String state, int[] fds) {
        try {
            return UnixSockets.sendDatagram(socket, address, state.getBytes(StandardCharsets.UTF_8), fds);
        } catch (RuntimeException e) {
            if (!failed) {
                failed = true;
                LOG.log(WARNING, "notifying systemd on " + address + " failed (" + e.getMessage() + "); serving on");
            }
            return true; // not deliverable: dropped, as before
        }
    }

    /** The sender thread: the queue's head, again and again until the socket takes it, then the next. */
    private void drain() {
        while (true) {
            Pending p;
            synchronized (queue) {
                while (queue.isEmpty()) {
                    if (closing) {
                        return;
                    }
                    try {
                        queue.wait();
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                p = queue.peek();
                int[] raw = FdMessages.raw(p.fds());
                if (trySend(p.state(), raw)) {
                    queue.poll();
                    p.fds().forEach(Fd::close);
                    continue;
                }
                try {
                    queue.wait(20); // systemd reads again: try once more
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    /** A sealed memfd holding {@code frame}. */
    static Fd catalogMemfd(byte[] frame) {
        Fd fd = Posix.memfdCreate(CATALOG_NAME, Posix.MFD_ALLOW_SEALING);
        try {
            Posix.ftruncate(fd, frame.length);
            DirFd.writeFully(fd, frame, 0);
            Posix.addSeals(fd, CATALOG_SEALS);
            return fd;
        } catch (RuntimeException e) {
            fd.close();
            throw e;
        }
    }

    private static String oneLine(String s) {
        return s.replace('\n', ' ');
    }

    /**
     * Stops the watchdog, sends what is still queued for up to {@value #CLOSE_FLUSH_MILLIS} ms (a systemd that reads
     * nothing gets nothing more), then closes the socket and the copies of fds that did not go.
     */
    @Override
    public void close() {
        Thread t = watchdog;
        if (t != null) {
            t.interrupt();
        }
        Thread s;
        synchronized (queue) {
            closing = true;
            queue.notifyAll();
            s = sender;
        }
        if (s != null) {
            try {
                s.join(CLOSE_FLUSH_MILLIS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            s.interrupt();
            try {
                s.join(1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        synchronized (queue) {
            queue.forEach(p -> p.fds().forEach(Fd::close));
            queue.clear();
        }
        socket.close();
    }
}
