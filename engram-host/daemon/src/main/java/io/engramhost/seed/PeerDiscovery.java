package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * The first step of a seed (docs/seeding.md, "The requester"): connects to every peer at once and reads its MANIFEST,
 * keeping the peers that hold at least one wanted table with the size and engram digest v1 the caller expects, each
 * with its first connection open. A peer that is this daemon's own address, this daemon itself, not ready, without
 * the key or serving other tables is skipped, in one line to the log.
 */
final class PeerDiscovery {
    /**
     * The most peers one seed asks: a longer list (a headless service of a large fleet) is cut to this many, chosen at
     * random, so that the new nodes of a fleet spread over its daemons instead of all asking the first ones.
     */
    static final int MAX_PEERS = 64;

    /** The usable peers in the order given, and how many were refused (not merely skipped: no key, other tables). */
    record Found(List<SeedPeer> peers, int refused) {
    }

    private PeerDiscovery() {
    }

    static Found discover(SeedSettings settings, List<Seeder.Table> tables, Consumer<String> log)
            throws InterruptedException {
        List<SeedPeer> all = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        for (InetSocketAddress a : settings.peers()) {
            SeedPeer p = new SeedPeer(a);
            if (!seen.add(p.name)) {
                continue;
            }
            if (settings.listen() != null && a.equals(settings.listen())) {
                log.accept("seed: peer " + p.name + " is this daemon's own --seed-listen address; skipping it");
                continue;
            }
            all.add(p);
        }
        if (all.size() > MAX_PEERS) {
            log.accept("seed: " + all.size() + " peers listed; asking " + MAX_PEERS + " of them, chosen at random (at"
                    + " most " + MAX_PEERS + " a seed)");
            Collections.shuffle(all);
            all = new ArrayList<>(all.subList(0, MAX_PEERS));
        }
        Map<String, Seeder.Table> wanted = new HashMap<>();
        tables.forEach(t -> wanted.put(t.name(), t));
        List<Thread> threads = new ArrayList<>();
        List<SeedPeer> usable = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger refused = new AtomicInteger();
        for (SeedPeer p : all) {
            Thread t = new Thread(() -> ask(p, settings, wanted, usable, refused, log), "engram-seed-peer");
            t.setDaemon(true);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        List<SeedPeer> out = new ArrayList<>();
        for (SeedPeer p : all) { // in the order given
            if (usable.contains(p)) {
                out.add(p);
            }
        }
        return new Found(out, refused.get());
    }

    /** Asks {@code p} for its MANIFEST: into {@code usable} when it holds a wanted table, else one line to the log. */
    private static void ask(SeedPeer p, SeedSettings settings, Map<String, Seeder.Table> wanted, List<SeedPeer> usable,
            AtomicInteger refused, Consumer<String> log) {
        try {
            PeerConnection c = PeerConnection.open(p.address, settings.key(), settings.instanceId(), settings.tls());
            SeedWire.Manifest m;
            try {
                m = c.manifest(wanted.keySet());
            } catch (IOException | RuntimeException e) {
                c.close();
                throw e;
            }
            int matching = 0;
            String firstDifference = null;
            for (int k = 0; k < m.tables().size(); k++) {   // only the tables this daemon loads
                SeedWire.Table st = m.tables().get(k);
                Seeder.Table w = wanted.get(st.name());
                if (st.bytes() == w.bytes() && st.digest() == w.expectedDigest()) {
                    p.index.put(st.name(), m.indices().get(k));
                    p.tables.put(st.name(), st);
                    matching++;
                } else if (firstDifference == null) {
                    firstDifference = "table '" + st.name() + "' has " + st.bytes() + " bytes and engram digest"
                            + " v1 " + ContentDigest.hex(st.digest()) + ", this checkpoint's "
                            + w.bytes() + " and " + ContentDigest.hex(w.expectedDigest());
                }
            }
            if (matching == 0) {
                c.close();
                refused.incrementAndGet();
                log.accept("seed: peer " + p.name + " serves another checkpoint (fingerprint "
                        + m.fingerprintSha256().substring(0, 16) + "...: "
                        + (firstDifference != null ? firstDifference : "none of this daemon's tables")
                        + "); skipping it");
                return;
            }
            if (firstDifference != null) {
                log.accept("seed: peer " + p.name + " holds " + matching + " of the tables; others differ ("
                        + firstDifference + ")");
            }
            p.first = c;
            usable.add(p);
        } catch (PeerConnection.PeerException e) {
            if (!e.benign) {
                refused.incrementAndGet();
            }
            log.accept("seed: " + e.getMessage() + "; skipping it");
        } catch (IOException | RuntimeException e) {
            refused.incrementAndGet();
            log.accept("seed: peer " + p.name + ": " + e + "; skipping it");
        }
    }
}
