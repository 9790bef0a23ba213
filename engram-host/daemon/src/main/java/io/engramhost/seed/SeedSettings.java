package io.engramhost.seed;

import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.util.Bytes;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A daemon's seeding: where it exports ({@code --seed-listen}, null: it does not), the peers it fills its tables
 * from ({@code --seed-from}, empty: none), the key ({@code --seed-key}) and this process's instance id, which a
 * peer list that names this daemon itself is told apart by; the TLS both ends use ({@code --seed-tls-*}; null:
 * none, the frames go in the clear); and the memory a seed may hold ranges in while their regions are still being
 * created ({@code --seed-staging}, bytes; 0: none). The options as given are a {@link Context}, checked together
 * once by its {@link Context#conclude}.
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

    /**
     * The seeding options as given ({@code serve}'s flags, unchecked), made into {@link SeedSettings} once by {@link
     * #conclude}, which checks them together: a flag that needs another, the key and TLS files read and checked, the
     * addresses (an IP literal to listen on; the peers' names resolved, a name that does not resolve skipped in one
     * line), the staging size. Each failure is an {@link IllegalArgumentException} of one line naming the flag.
     */
    public static final class Context {
        private static final System.Logger LOG = System.getLogger(SeedSettings.class.getName());
        private String listen;
        private List<String> from = List.of();
        private Path key;
        private Path tlsCert;
        private Path tlsKey;
        private Path tlsCa;
        private Long staging;

        /** {@code --seed-listen ADDR:PORT}; null: not given. */
        public Context listen(String addressAndPort) {
            this.listen = addressAndPort;
            return this;
        }

        /** {@code --seed-from HOST:PORT,...}. */
        public Context from(List<String> peers) {
            this.from = List.copyOf(peers);
            return this;
        }

        /** {@code --seed-key FILE}; null: not given. */
        public Context key(Path file) {
            this.key = file;
            return this;
        }

        /** {@code --seed-tls-cert}, {@code --seed-tls-key}, {@code --seed-tls-ca}; each null when not given. */
        public Context tls(Path cert, Path privateKey, Path ca) {
            this.tlsCert = cert;
            this.tlsKey = privateKey;
            this.tlsCa = ca;
            return this;
        }

        /** {@code --seed-staging} in bytes; null: not given. */
        public Context staging(Long bytes) {
            this.staging = bytes;
            return this;
        }

        /** The settings, every option checked; no seeding ({@link #NONE}) when neither end is asked for. */
        public SeedSettings conclude() {
            boolean anyTls = tlsCert != null || tlsKey != null || tlsCa != null;
            if (listen == null && from.isEmpty()) {
                if (key != null) {
                    throw new IllegalArgumentException("--seed-key needs --seed-listen or --seed-from");
                }
                if (anyTls) {
                    throw new IllegalArgumentException("--seed-tls-cert, --seed-tls-key and --seed-tls-ca"
                            + " need --seed-listen or --seed-from");
                }
                if (staging != null) {
                    throw new IllegalArgumentException("--seed-staging needs --seed-from");
                }
                return NONE;
            }
            if (key == null) {
                throw new IllegalArgumentException("--seed-key FILE is needed with "
                        + (listen != null ? "--seed-listen" : "--seed-from"));
            }
            SeedKey k = SeedKey.read(key);
            SeedTls tls = null;
            if (anyTls) {
                if (tlsCert == null || tlsKey == null || tlsCa == null) {
                    List<String> missing = new ArrayList<>();
                    if (tlsCert == null) {
                        missing.add("--seed-tls-cert");
                    }
                    if (tlsKey == null) {
                        missing.add("--seed-tls-key");
                    }
                    if (tlsCa == null) {
                        missing.add("--seed-tls-ca");
                    }
                    throw new IllegalArgumentException("seeding over TLS needs all three of --seed-tls-cert,"
                            + " --seed-tls-key and --seed-tls-ca; missing: " + String.join(", ", missing));
                }
                tls = SeedTls.read(tlsCert, tlsKey, tlsCa);
            }
            InetSocketAddress at = null;
            if (listen != null) {
                String[] hp = hostPort("--seed-listen", listen);
                at = new InetSocketAddress(literal("--seed-listen", hp[0]), port("--seed-listen", hp[1], listen));
            }
            List<InetSocketAddress> peers = new ArrayList<>();
            for (String p : from) {
                String[] hp = hostPort("--seed-from", p);
                int port = port("--seed-from", hp[1], p);
                try {
                    for (InetAddress a : InetAddress.getAllByName(hp[0])) {
                        peers.add(new InetSocketAddress(a, port));
                    }
                } catch (UnknownHostException e) {
                    // a peer whose name does not resolve (yet): the others, or the disk
                    LOG.log(System.Logger.Level.WARNING, "seed: --seed-from " + p
                            + ": the name does not resolve; skipping it");
                }
            }
            if (!from.isEmpty() && peers.isEmpty()) {
                LOG.log(System.Logger.Level.WARNING, "seed: no --seed-from name resolves; loading from the disk");
            }
            if (staging != null && from.isEmpty()) {
                throw new IllegalArgumentException("--seed-staging needs --seed-from (it holds what a seed"
                        + " receives; an exporter needs none)");
            }
            if (staging != null && staging != 0 && staging < STAGING_UNIT) {
                throw new IllegalArgumentException("--seed-staging " + staging + ": at least "
                        + Bytes.format(STAGING_UNIT) + " (one range), or 0 for none");
            }
            return new SeedSettings(at, peers, k, SeedAuth.random(SeedAuth.ID_BYTES), tls,
                    staging == null ? 0 : staging);
        }

        private static String[] hostPort(String flag, String v) {
            int colon = v.lastIndexOf(':');
            if (colon <= 0 || colon == v.length() - 1) {
                throw new IllegalArgumentException(flag + ": '" + v + "' is not HOST:PORT");
            }
            String host = v.substring(0, colon);
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            }
            return new String[] {host, v.substring(colon + 1)};
        }

        private static int port(String flag, String p, String whole) {
            try {
                int n = Integer.parseInt(p);
                if (n >= 1 && n <= 65535) {
                    return n;
                }
            } catch (NumberFormatException e) {
                // below
            }
            throw new IllegalArgumentException(flag + ": '" + whole + "': the port must be 1-65535");
        }

        /** A literal IP address (no name lookup: what the daemon listens on is never a name). */
        private static InetAddress literal(String flag, String a) {
            if (!a.matches("[0-9.]+|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*")) {
                throw new IllegalArgumentException(flag + " must name an IP address such as 127.0.0.1 or"
                        + " 10.0.0.5, got '" + a + "'");
            }
            try {
                return InetAddress.getByName(a);
            } catch (UnknownHostException e) {
                throw new IllegalArgumentException(flag + ": not an IP address: '" + a + "'");
            }
        }
    }
}
