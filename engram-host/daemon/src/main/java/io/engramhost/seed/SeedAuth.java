package io.engramhost.seed;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The seeding handshake's proofs (docs/seeding.md, "Authentication"): each side sends a fresh random nonce, and each
 * proves it holds the key with HMAC-SHA256 over both nonces and both instance ids, under a label of its own role, so
 * that a proof made for one direction or one connection is worth nothing in another. No key byte is sent.
 */
public final class SeedAuth {
    /** Bytes of a nonce. */
    public static final int NONCE_BYTES = 32;
    /** Bytes of a daemon's instance id. */
    public static final int ID_BYTES = 16;
    /** Bytes of a proof (HMAC-SHA256). */
    public static final int MAC_BYTES = 32;
    private static final byte[] SERVER = "engram-seed-v1 server".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] CLIENT = "engram-seed-v1 client".getBytes(StandardCharsets.US_ASCII);
    private static final SecureRandom RANDOM = new SecureRandom();

    private SeedAuth() {
    }

    /** {@code n} fresh random bytes (a nonce, an instance id). */
    public static byte[] random(int n) {
        byte[] b = new byte[n];
        RANDOM.nextBytes(b);
        return b;
    }

    /** The exporter's proof. */
    public static byte[] serverProof(SeedKey key, byte[] clientNonce, byte[] serverNonce, byte[] clientId,
            byte[] serverId) {
        return mac(key, SERVER, clientNonce, serverNonce, clientId, serverId);
    }

    /** The requester's proof. */
    public static byte[] clientProof(SeedKey key, byte[] clientNonce, byte[] serverNonce, byte[] clientId,
            byte[] serverId) {
        return mac(key, CLIENT, clientNonce, serverNonce, clientId, serverId);
    }

    /**
     * Makes one proof of each kind with {@code key} and throws them away, so that the first peer's handshake does not
     * pay for loading the JCA's HmacSHA256 and the random source (about 0.45 s on a 2-core VM, over the 5 s a peer
     * waits for CHALLENGE under an emulator: bench/systemd-runs.md, seed run 1).
     */
    public static void warm(SeedKey key) {
        byte[] n = random(NONCE_BYTES);
        byte[] id = random(ID_BYTES);
        same(serverProof(key, n, n, id, id), clientProof(key, n, n, id, id));
    }

    /** Compares two proofs in time independent of where they differ. */
    public static boolean same(byte[] a, byte[] b) {
        return MessageDigest.isEqual(a, b);
    }

    private static byte[] mac(SeedKey key, byte[] label, byte[]... parts) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(key.bytes(), "HmacSHA256"));
            m.update(label);
            for (byte[] p : parts) {
                m.update(p);
            }
            return m.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available: " + e, e);
        }
    }
}
