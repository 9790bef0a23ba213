package io.engramhost.daemon.systemd;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.daemon.launch.Adoption;
import io.engramhost.daemon.launch.DaemonLock;
import io.engramhost.daemon.launch.SocketClaim;
import io.engramhost.os.DirFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixListener;
import io.engramhost.os.UnixSockets;
import io.engramhost.protocol.Handover;
import io.engramhost.store.AdoptedCatalog;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogFactory;
import io.engramhost.store.LoadReport;
import io.engramhost.store.StoreSettings;
import io.engramhost.util.Closer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A restart under systemd (docs/upgrade.md, "Under systemd: the fd store"): the fds the previous run put in the fd store come back
 * at 3, 4, ... with {@code LISTEN_FDS}, {@code LISTEN_PID} and {@code LISTEN_FDNAMES}, under the names
 * {@link SystemdNotify} gave them. When the catalog memfd is among them, and it passes its checks (seals, size,
 * checksum), the checkpoint on disk still has the catalog's fingerprint and every region fd is what the catalog
 * says, the daemon serves those tables without reading the checkpoint; otherwise it says why in one line and loads.
 */
public final class FdStoreRestart {
    private static final System.Logger LOG = System.getLogger(FdStoreRestart.class.getName());
    /** sd_listen_fds(3): the first fd passed. */
    static final int FIRST_FD = 3;
    /** The most a catalog memfd may hold: far more than any catalog (its manifests are bounded by the protocol). */
    static final int MAX_CATALOG_BYTES = 1 << 30;

    private FdStoreRestart() {
    }

    /** The fds systemd passed, by name; each taken at most once, the rest closed by {@link #closeRest}. */
    public static final class Passed {
        private final List<String> names;
        private final List<Fd> fds;
        private final Set<String> kept = new LinkedHashSet<>();

        Passed(List<String> names, List<Fd> fds) {
            this.names = names;
            this.fds = fds;
        }

        /** The first fd named {@code name} not yet taken, or null. */
        Fd take(String name) {
            for (int i = 0; i < fds.size(); i++) {
                if (fds.get(i) != null && names.get(i).equals(name)) {
                    Fd fd = fds.get(i);
                    fds.set(i, null);
                    return fd;
                }
            }
            return null;
        }

        /**
         * The listening socket: the fd named {@value SystemdNotify#LISTEN_NAME}, else (a socket unit, whatever its
         * FileDescriptorName=) the one fd that listens on {@code socket}; null when none.
         */
        public Fd takeListener(Path socket) {
            Fd fd = take(SystemdNotify.LISTEN_NAME);
            if (fd != null) {
                return fd;
            }
            for (int i = 0; i < fds.size(); i++) {
                if (fds.get(i) != null && UnixSockets.notListeningOn(fds.get(i), socket) == null) {
                    fd = fds.get(i);
                    fds.set(i, null);
                    return fd;
                }
            }
            return null;
        }

        /** {@code name}'s entry in the fd store holds what this daemon serves: it stays there. */
        public void keep(String name) {
            kept.add(name);
        }

        int count(String prefix) {
            int n = 0;
            for (String s : names) {
                n += s.startsWith(prefix) ? 1 : 0;
            }
            return n;
        }

        /**
         * Closes every fd not taken and returns the names to remove from the fd store: every name passed but those
         * kept.
         */
        public Set<String> closeRest() {
            for (int i = 0; i < fds.size(); i++) {
                if (fds.get(i) != null) {
                    fds.get(i).close();
                    fds.set(i, null);
                }
            }
            Set<String> stale = new LinkedHashSet<>(names);
            stale.removeAll(kept);
            return stale;
        }
    }

    /**
     * Takes the fds systemd passed to this process (sd_listen_fds(3)): null unless {@code LISTEN_PID} is this
     * pid and {@code LISTEN_FDS} is positive. Each fd is made CLOEXEC, and the {@code LISTEN_*} variables are
     * unset, so that nothing this process starts mistakes them for its own.
     */
    public static Passed fromEnvironment(Map<String, String> env) {
        String pid = env.get("LISTEN_PID");
        String count = env.get("LISTEN_FDS");
        if (pid == null || count == null) {
            return null;
        }
        for (String v : List.of("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")) {
            Posix.unsetenv(v);
        }
        int n;
        try {
            if (Integer.parseInt(pid.trim()) != Posix.getpid()) {
                return null; // meant for another process
            }
            n = Integer.parseInt(count.trim());
        } catch (NumberFormatException e) {
            LOG.log(WARNING, "LISTEN_PID=" + pid + " LISTEN_FDS=" + count + " are not numbers: ignored");
            return null;
        }
        if (n <= 0) {
            return null;
        }
        String joined = env.get("LISTEN_FDNAMES");
        String[] given = joined == null ? new String[0] : joined.split(":", -1);
        List<String> names = new ArrayList<>(n);
        List<Fd> fds = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            Fd fd = Fd.adopt(FIRST_FD + i, "fd " + (FIRST_FD + i) + " from systemd");
            Posix.setCloexec(fd);
            fds.add(fd);
            names.add(i < given.length ? given[i] : "unknown");
        }
        LOG.log(INFO, "systemd passed " + n + " fds (" + summary(names) + ")");
        return new Passed(names, fds);
    }

    /** What the daemon adopted from the fd store: its tables, ready, and the catalog memfd to store again. */
    public record Adopted(Adoption adoption, Fd catalogMemfd) {
    }

    /**
     * The tables in {@code passed}, ready to serve, or null (after one log line saying why) when there are none or
     * they must not be served: then the caller loads the checkpoint, and the fds taken here are closed. The
     * checkpoint {@code store} names must still have the catalog's fingerprint; {@code socket}'s path is claimed
     * ({@code allowUids}: the other uids admitted, for whom its directory is made reachable). {@code notify} (null:
     * not under systemd) checks that the fd store can hold the tables again.
     *
     * @throws IllegalStateException when the fd store is too small, or another daemon holds the lock
     */
    public static Adopted adopt(Path socket, Set<Integer> allowUids, StoreSettings store, Passed passed,
            SystemdNotify notify) {
        long t0 = System.nanoTime();
        int regionNames = passed.count(SystemdNotify.REGION_PREFIX);
        Fd memfd = passed.take(SystemdNotify.CATALOG_NAME);
        if (memfd == null) {
            if (regionNames > 0) {
                LOG.log(WARNING, "the fd store holds " + regionNames + " region fds but no catalog: loading the"
                        + " checkpoint");
            }
            return null;
        }
        Handover.Catalog handed;
        LoadReport report;
        try {
            handed = Handover.Catalog.decode(readCatalog(memfd), regionNames + 1);
            report = LoadReport.parse(handed.report());
        } catch (RuntimeException e) {
            memfd.close();
            LOG.log(WARNING, "the catalog in the fd store is refused (" + e.getMessage() + "): loading the checkpoint");
            return null;
        }
        if (notify != null) {
            notify.checkFdStore(handed.regionCount());
        }
        Fingerprint onDisk = CatalogFactory.fingerprintOnDisk(store);
        if (!onDisk.sha256Hex().equals(handed.fingerprintSha256())) {
            memfd.close();
            Fingerprint stored = Fingerprint.decode(handed.served().get(0).manifest().fingerprint());
            LOG.log(WARNING, "the checkpoint changed since its tables went to the fd store (fingerprint "
                    + onDisk.sha256Hex() + " on disk, " + handed.fingerprintSha256() + " stored: "
                    + String.join("; ", stored.differences(onDisk, 3)) + "): dropping the stored tables and loading"
                    + " the checkpoint");
            return null;
        }
        List<Fd> regions = new ArrayList<>();
        Catalog catalog;
        try {
            for (int i = 0; i < handed.regionCount(); i++) {
                Fd fd = passed.take(SystemdNotify.REGION_PREFIX + i);
                if (fd == null) {
                    throw new IllegalStateException("no fd named " + SystemdNotify.REGION_PREFIX + i);
                }
                regions.add(fd);
            }
            catalog = AdoptedCatalog.adopt(handed, regions, false); // owns the region fds from here on
            String older = AdoptedCatalog.sealedBeforeWrite(catalog);
            if (older != null) {
                Closer.closeAll(catalog, memfd);
                LOG.log(WARNING, "the tables in the fd store are kept no longer: " + older + ": loading the"
                        + " checkpoint once");
                return null;
            }
        } catch (RuntimeException e) {
            regions.forEach(Fd::close);
            memfd.close();
            LOG.log(WARNING, "the tables in the fd store are refused (" + e.getMessage() + "): loading the checkpoint");
            return null;
        }
        DaemonLock lock;
        UnixListener listener;
        Fd handedListener = passed.takeListener(socket);
        try {
            lock = SocketClaim.lock(socket, allowUids);
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, catalog, memfd, handedListener);
            throw e;
        }
        try {
            listener = SocketClaim.listen(lock, socket, handedListener, allowUids);
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, catalog, memfd, lock);
            throw e;
        }
        if (handedListener != null && handedListener.isOpen()) {
            passed.keep(SystemdNotify.LISTEN_NAME);
        }
        for (int i = 0; i < handed.regionCount(); i++) {
            passed.keep(SystemdNotify.REGION_PREFIX + i);
        }
        passed.keep(SystemdNotify.CATALOG_NAME);
        LoadReport.Origin origin = LoadReport.Origin.handedOver(LoadReport.How.FD_STORE, 0, t0, handed.build());
        LOG.log(INFO, "adopted from systemd's fd store in " + origin.handoverMillis() + " ms: "
                + catalog.allTables().size() + " tables in " + handed.regionCount() + " regions, fingerprint "
                + catalog.fingerprintSha256() + "; 0 bytes read from the checkpoint");
        return new Adopted(new Adoption(lock, listener, catalog, null, List.of(), 1, report.withOrigin(origin)),
                memfd);
    }

    /** The catalog memfd's bytes, once it is a memfd sealed against any change and of a sane size. */
    static byte[] readCatalog(Fd memfd) {
        FileStat st = DirFd.stat(memfd);
        if (!st.isRegular()) {
            throw new IllegalStateException("it is " + st.typeName() + ", not a memfd");
        }
        int seals = Posix.getSeals(memfd);
        if ((seals & SystemdNotify.CATALOG_SEALS) != SystemdNotify.CATALOG_SEALS) {
            throw new IllegalStateException("its seals are 0x" + Integer.toHexString(seals) + ", not 0x"
                    + Integer.toHexString(SystemdNotify.CATALOG_SEALS));
        }
        if (st.size() <= 0 || st.size() > MAX_CATALOG_BYTES) {
            throw new IllegalStateException("it holds " + st.size() + " bytes");
        }
        byte[] b = DirFd.readUpTo(memfd, (int) st.size());
        if (b.length != st.size()) {
            throw new IllegalStateException("read " + b.length + " of its " + st.size() + " bytes");
        }
        return b;
    }

    private static String summary(List<String> names) {
        Map<String, Integer> counts = new LinkedHashMap<>();
        for (String n : names) {
            counts.merge(n.startsWith(SystemdNotify.REGION_PREFIX) ? SystemdNotify.REGION_PREFIX + "*" : n, 1,
                    Integer::sum);
        }
        List<String> out = new ArrayList<>();
        counts.forEach((k, v) -> out.add(v == 1 ? k : k + " x" + v));
        return String.join(", ", out);
    }
}
