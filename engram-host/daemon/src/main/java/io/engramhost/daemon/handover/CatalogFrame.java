package io.engramhost.daemon.handover;

import io.engramhost.os.Fd;
import io.engramhost.protocol.Handover;
import io.engramhost.store.Catalog;
import io.engramhost.util.BuildInfo;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * A catalog as HANDOVER_CATALOG carries it (docs/protocol.md, "Handing over to a successor daemon"): the frame, and its
 * region fds in the order the frame indexes them, each fd once. A predecessor sends it to its successor (the
 * listening socket before the regions); systemd's fd store keeps the same frame in the catalog memfd.
 */
public record CatalogFrame(byte[] frame, List<Fd> regionFds) {
    /** Encodes {@code catalog} with {@code report} (the load's facts, JSON), in this build's name. */
    public static CatalogFrame of(Catalog catalog, String report) {
        List<Fd> fds = new ArrayList<>();
        Map<Fd, Integer> index = new IdentityHashMap<>();
        List<Handover.Served> served = new ArrayList<>();
        for (Map.Entry<Integer, Catalog.Served> e : catalog.byDevice().entrySet()) {
            List<Fd> own = e.getValue().fds();
            int[] idx = new int[own.size()];
            for (int i = 0; i < own.size(); i++) {
                Integer at = index.get(own.get(i));
                if (at == null) {
                    at = index.size();
                    index.put(own.get(i), at);
                    fds.add(own.get(i));
                }
                idx[i] = at;
            }
            served.add(new Handover.Served(e.getKey(), e.getValue().manifest(), idx));
        }
        byte[] frame = new Handover.Catalog(BuildInfo.version(), catalog.backend(), catalog.fingerprintSha256(),
                fds.size(), served, report).encode();
        return new CatalogFrame(frame, List.copyOf(fds));
    }
}
