package io.engramhost.daemon.loop;

import io.engramhost.store.Catalog;
import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;

/**
 * The answers a ready daemon gives from its catalog, made with the catalog (one of these per catalog, for its whole
 * life) and shared by every request: each GPU's MANIFEST frame in each protocol version, and STATUS's
 * {@code tables}. A mismatch's ERROR shares the catalog's fingerprint bytes ({@code catalog.manifest().fingerprint()}).
 * Each is encoded at most once, at its first use: a manifest holds the fingerprint (up to 16 MiB) and STATUS's tables
 * reach 17 MB at 100,000 tables, so encodings nobody asks for are never held on the daemon's bounded heap. Nothing here
 * asks "the same catalog?": a new catalog comes with new answers. STATUS's tables are the daemon's to encode (its
 * STATUS document); these answers only keep the encoding.
 */
public final class Answers {
    private final Catalog catalog;
    /** Key: device * 4 + version, for -1 and each GPU with a manifest of its own. */
    private final ConcurrentHashMap<Long, byte[]> manifests = new ConcurrentHashMap<>();
    private final Function<Catalog, byte[]> statusTablesOf;
    private volatile byte[] statusTables;

    /** {@code statusTablesOf}: STATUS's {@code tables} of a catalog, as JSON (called at most once). */
    public Answers(Catalog catalog, Function<Catalog, byte[]> statusTablesOf) {
        this.catalog = catalog;
        this.statusTablesOf = statusTablesOf;
    }

    public Catalog catalog() {
        return catalog;
    }

    /** The MANIFEST frame for a client on GPU {@code device} (-1: none; a GPU without its own: the host tables'). */
    byte[] manifest(int device, int version) {
        int key = catalog.byDevice().containsKey(device) ? device : -1;
        return manifests.computeIfAbsent((long) key * 4 + version, k -> {
            ByteBuffer encoded = catalog.servedTo(key).manifest().encode(version);
            byte[] b = new byte[encoded.remaining()];
            encoded.get(b);
            return b;
        });
    }

    /** STATUS's {@code tables}: a JSON array. */
    public byte[] statusTables() {
        byte[] t = statusTables;
        if (t == null) {
            synchronized (this) {
                t = statusTables;
                if (t == null) {
                    t = statusTablesOf.apply(catalog);
                    statusTables = t;
                }
            }
        }
        return t;
    }
}
