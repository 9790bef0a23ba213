package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Objects;

/**
 * A daemon's seeding: where it exports ({@code --seed-listen}, null: it does not), the peers it fills its tables
 * from ({@code --seed-from}, empty: none), the key ({@code --seed-key}) and this process's instance id, which a
 * peer list that names this daemon itself is told apart by; the TLS both ends use ({@code --seed-tls-*}; null:
 * none, the frames go in the clear); and the memory a seed may hold ranges in while their regions are still being
 * created ({@code --seed-staging}, bytes; 0: none).
 */
public record SeedSettings(InetSocketAddress listen, List<InetSocketAddress> peers, SeedKey key, byte[] instanceId,
        SeedTls tls, long stagingBytes) {
    /** A staging buffer's bytes: one range of the transfer, a chunk of the engram digest v1. */
    public static final long STAGING_UNIT = ContentDigest.CHUNK;

    /** No seeding. */
    public static final SeedSettings NONE = new SeedSettings(null, List.of(), null, SeedAuth.random(SeedAuth.ID_BYTES),
            null, 0);

    /** Seeding without staging. */
    public SeedSettings(InetSocketAddress listen, List<InetSocketAddress> peers, SeedKey key, byte[] instanceId,
            SeedTls tls) {
        this(listen, peers, key, instanceId, tls, 0);
    }

    public SeedSettings {
        peers = List.copyOf(peers);
        Objects.requireNonNull(instanceId, "instanceId");
        if (instanceId.length != SeedAuth.ID_BYTES) {
            throw new IllegalArgumentException("an instance id has " + SeedAuth.ID_BYTES + " bytes");
        }
        instanceId = instanceId.clone();
        if (stagingBytes < 0) {
            throw new IllegalArgumentException("--seed-staging: a size of 0 or more, not " + stagingBytes);
        }
        if ((listen != null || !peers.isEmpty()) && key == null) {
            throw new IllegalArgumentException("--seed-key: seeding (--seed-listen, --seed-from) needs a key file");
        }
    }

    public boolean fromPeers() {
        return !peers.isEmpty();
    }

    @Override
    public byte[] instanceId() {
        return instanceId.clone();
    }

    /** {@code host:port} as an operator writes it. */
    public static String show(InetSocketAddress a) {
        String h = a.getAddress() != null ? a.getAddress().getHostAddress() : a.getHostString();
        return (h.contains(":") ? "[" + h + "]" : h) + ":" + a.getPort();
    }
}
