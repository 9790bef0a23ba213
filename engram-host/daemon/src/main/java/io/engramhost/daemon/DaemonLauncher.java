package io.engramhost.daemon;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.checkpoint.ContentIdentity;
import io.engramhost.checkpoint.Selection;
import io.engramhost.checkpoint.WritableByOthers;
import io.engramhost.daemon.handover.Takeover;
import io.engramhost.daemon.launch.Adoption;
import io.engramhost.daemon.launch.DaemonLock;
import io.engramhost.daemon.launch.PreparedLoad;
import io.engramhost.daemon.launch.SocketClaim;
import io.engramhost.daemon.systemd.FdStoreRestart;
import io.engramhost.daemon.systemd.Supervisor;
import io.engramhost.daemon.systemd.SystemdNotify;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixListener;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.CatalogFactory;
import io.engramhost.store.LoadReport;
import io.engramhost.util.Bytes;
import io.engramhost.util.Closer;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * The one way a daemon starts ({@code serve}, tests and benchmarks alike): it gets its tables from systemd's fd
 * store, else from a takeover (when asked), else prepares a load of the checkpoint, each of which yields one
 * {@link Adoption}, and hands that to {@link Daemon#run}. Whatever fails on the way is one line, and leaves nothing
 * open.
 */
public final class DaemonLauncher {
    private static final System.Logger LOG = System.getLogger(DaemonLauncher.class.getName());

    private DaemonLauncher() {
    }

    /** What a daemon reads of the process it runs in: its environment variables (systemd's among them). */
    public record Environment(Map<String, String> variables) {
        public Environment {
            variables = Map.copyOf(variables);
        }

        /** This process's environment. */
        public static Environment current() {
            return new Environment(System.getenv());
        }

        /** No variables: not under systemd. */
        public static Environment none() {
            return new Environment(Map.of());
        }
    }

    /**
     * Starts the daemon {@code context} describes, in this process: serving once this returns (answering
     * {@code loading} while a load runs; {@link Daemon#awaitReady} waits for it).
     *
     * @throws DaemonLock.AlreadyRunningException when a live daemon owns the socket path
     * @throws RuntimeException with one line naming the input, when anything about it is wrong
     */
    public static Daemon start(DaemonContext context, Environment environment) {
        context.conclude();
        // Under systemd (docs/upgrade.md, "Under systemd: the fd store"): the notify socket, and the fds a previous
        // run left in the fd store (or a socket unit's listening socket), passed at 3, 4, ...
        SystemdNotify notify = SystemdNotify.fromEnvironment(environment.variables());
        FdStoreRestart.Passed passed = FdStoreRestart.fromEnvironment(environment.variables());
        Adoption adoption = null;
        Fd keptCatalog = null;
        Supervisor supervisor = null;
        try {
            if (passed != null && !context.takeover()) {
                FdStoreRestart.Adopted adopted = FdStoreRestart.adopt(context.socket(), context.allowUids(),
                        context.store(), passed, notify);
                if (adopted != null) {
                    adoption = adopted.adoption();
                    keptCatalog = adopted.catalogMemfd();
                }
            }
            if (adoption == null && context.takeover()) {
                try {
                    adoption = Takeover.run(new Takeover.Settings(context.socket(), context.allowUids(),
                            context.backend(), context.verifyDigests(), context::mayStop, context.hooks(),
                            () -> prepareTables(context, null)));
                } catch (Takeover.PredecessorGoneException e) {
                    LOG.log(WARNING, e.getMessage() + "; loading the checkpoint instead");
                }
            }
            if (adoption == null) {
                adoption = prepareLoad(context, notify, passed);
            }
            Set<String> stale = passed == null ? Set.of() : passed.closeRest();
            if (notify != null) {
                supervisor = new Supervisor(notify, stale, keptCatalog);
            } else if (keptCatalog != null) {
                keptCatalog.close();
            }
        } catch (RuntimeException | Error e) {
            if (passed != null) {
                passed.closeRest();
            }
            Closer.closeAllAfter(e, notify, keptCatalog, adoption);
            throw e;
        }
        return Daemon.run(adoption, supervisor, context);
    }

    /**
     * The tables {@code context} describes, validated and ready to load (or those the context makes itself), each
     * warning said in one line. {@code notify} (null: not under systemd) checks the fd store can keep them.
     */
    static PreparedLoad prepareTables(DaemonContext context, SystemdNotify notify) {
        if (context.catalog() != null) {
            return new PreparedLoad(context.catalog(), LoadReport.EMPTY);
        }
        CatalogFactory.Prepared prepared = CatalogFactory.prepare(context.store());
        LOG.log(INFO, "selection: " + prepared.selection().description());
        prepared.selection().warning().ifPresent(w -> LOG.log(WARNING, w));
        prepared.identity().notes().forEach(n -> LOG.log(WARNING, n));
        LOG.log(INFO, "content identity: " + prepared.identity().level().text() + identityWord(prepared.identity()));
        LOG.log(INFO, "checkpoint valid: " + prepared.tensors().size() + " tables, "
                + Bytes.format(prepared.tensors().stream().mapToLong(t -> t.length()).sum()) + ", fingerprint "
                + prepared.fingerprint().sha256Hex() + ", " + prepared.placement() + "; memory: "
                + prepared.budget());
        prepared.spillWarning().ifPresent(w -> LOG.log(WARNING, "--numa " + context.numa() + ": " + w));
        WritableByOthers.warning(prepared.checkpoint(), Posix.geteuid()).ifPresent(w -> LOG.log(WARNING, w));
        try {
            if (notify != null) {
                notify.checkFdStore(prepared.regionCount());
            }
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, prepared.builder());
            throw e;
        }
        Selection selection = prepared.selection();
        return new PreparedLoad(prepared.builder(), LoadReport.EMPTY.withMemory(prepared.budget(), context.memoryBudget())
                .withSelected(new LoadReport.Selected(selection.rule().text(), selection.description(),
                        prepared.tensors().size(), prepared.identity().level().text())));
    }

    /** What the level means for this load, after the level's name. */
    private static String identityWord(ContentIdentity identity) {
        return switch (identity.level()) {
            case HEADERS -> " (no digest record and no Hugging Face snapshot: an expectation compares headers only;"
                    + " engram-host inspect --write-digests writes a record)";
            case RECORD, RECORD_AND_HF_SNAPSHOT -> " (" + identity.tables().size() + " tables checked against "
                    + identity.records().stream().map(Object::toString).collect(Collectors.joining(", "))
                    + " as they load" + (identity.snapshotFiles().isEmpty() ? ")"
                    : "; " + identity.snapshotFiles().size() + " snapshot files named by their SHA-256)");
            case HF_SNAPSHOT -> " (" + identity.snapshotFiles().size() + " snapshot files named by their SHA-256,"
                    + " not rehashed at load; engram-host verify rehashes them)";
        };
    }

    /**
     * A daemon about to load: the checkpoint validated (or the tables the context makes), then the socket path
     * claimed, serving on the listening socket systemd passed if there is one.
     */
    private static Adoption prepareLoad(DaemonContext context, SystemdNotify notify, FdStoreRestart.Passed passed) {
        PreparedLoad tables = prepareTables(context, notify);
        CatalogBuilder builder = tables.builder();
        LoadReport report = tables.report();
        DaemonLock lock;
        try {
            lock = SocketClaim.lock(context.socket(), context.allowUids());
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, builder);
            throw e;
        }
        Fd handed = passed == null ? null : passed.takeListener(context.socket());
        UnixListener listener;
        try {
            listener = SocketClaim.listen(lock, context.socket(), handed, context.allowUids());
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, builder, lock);
            throw e;
        }
        if (handed != null && handed.isOpen()) {
            passed.keep(SystemdNotify.LISTEN_NAME);
        }
        return Adoption.toLoad(lock, listener, builder, report);
    }
}
