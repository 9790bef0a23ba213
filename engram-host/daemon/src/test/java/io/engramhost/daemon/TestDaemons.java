package io.engramhost.daemon;

import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.store.Catalog;
import io.engramhost.store.CatalogBuilder;
import io.engramhost.store.LoadProgress;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.function.Supplier;

/** Daemons in the test's JVM, started the way {@code serve} starts one ({@link DaemonLauncher}), tables made in memory. */
final class TestDaemons {
    /** The limits these tests use: small caps, a 1 s HELLO deadline and a 2 s request deadline. */
    static final ConnectionLimits LIMITS = new ConnectionLimits(64, 32, 1000, 2000, 60_000,
            ConnectionLimits.DEFAULT_REQUEST_MEMORY, 2);

    private TestDaemons() {
    }

    /** Settings for a daemon on {@code socket} serving what {@code catalog} builds. */
    static DaemonContext context(Path socket, CatalogBuilder catalog, Set<Integer> allowUids) {
        return new DaemonContext().socket(socket).catalog(catalog).numa("none").threads(2).allowUids(allowUids)
                .limits(LIMITS);
    }

    /** The daemon {@code context} describes, serving (its load may still run). */
    static Daemon start(DaemonContext context) {
        return DaemonLauncher.start(context, DaemonLauncher.Environment.none());
    }

    /** The daemon {@code context} describes, once ready. */
    static Daemon ready(DaemonContext context) throws Exception {
        Daemon d = start(context);
        try {
            d.awaitReady();
            return d;
        } catch (Exception | Error e) {
            d.close();
            throw e;
        }
    }

    /** Tables that are built only once {@link #open} is called: the daemon answers {@code loading} until then. */
    static final class Held implements CatalogBuilder {
        private final CountDownLatch gate = new CountDownLatch(1);
        private final Supplier<Catalog> catalog;

        Held(Supplier<Catalog> catalog) {
            this.catalog = catalog;
        }

        void open() {
            gate.countDown();
        }

        @Override
        public Catalog build(LoadProgress progress) throws Exception {
            gate.await();
            return catalog.get();
        }
    }
}
