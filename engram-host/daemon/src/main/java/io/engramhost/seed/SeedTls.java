package io.engramhost.seed;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.Signature;
import java.security.cert.CertPathValidator;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.PKIXParameters;
import java.security.cert.TrustAnchor;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.TrustManagerFactory;

/**
 * The seed channel's TLS ({@code --seed-tls-cert}, {@code --seed-tls-key}, {@code --seed-tls-ca}; docs/seeding.md,
 * "TLS"): this daemon's certificate chain and private key (PEM; the key PKCS#8, unencrypted, a private file as the
 * seed key is), and the certificates of the CA that signs every node's certificate. Both ends use TLS 1.3 and each
 * requires the other's certificate to be signed by that CA (host names are not checked: a CA of the fleet's own,
 * which signs only its nodes, is what a certificate proves membership of). The key challenge-response runs inside, as
 * without TLS. Everything is checked once, here, when the daemon starts: the files, that the key is the
 * certificate's, and that the certificate chains to the CA now; each failure is one line naming the flag and the fix.
 */
public final class SeedTls {
    /** The one protocol offered and accepted. */
    public static final String PROTOCOL = "TLSv1.3";
    /** The most bytes a PEM file given to these flags may have. */
    public static final long MAX_PEM_BYTES = 1L << 20;

    private final SSLContext context;
    private final String subject;

    private SeedTls(SSLContext context, String subject) {
        this.context = context;
        this.subject = subject;
    }

    /** Reads and checks the three files, and makes the TLS context both ends use. */
    public static SeedTls read(Path certFile, Path keyFile, Path caFile) {
        List<X509Certificate> chain = certificates("--seed-tls-cert", certFile);
        List<X509Certificate> ca = certificates("--seed-tls-ca", caFile);
        byte[] pem = SeedKey.readPrivate(keyFile, "--seed-tls-key", 1, MAX_PEM_BYTES, "a PEM key has at most "
                + MAX_PEM_BYTES + " bytes");
        PrivateKey key;
        try {
            key = privateKey(keyFile, pem, chain.get(0));
        } finally {
            Arrays.fill(pem, (byte) 0);
        }
        matches(key, chain.get(0), keyFile, certFile);
        chainsTo(chain, ca, certFile, caFile);
        char[] password = "seed-tls".toCharArray(); // of the key store in memory only
        try {
            KeyStore own = KeyStore.getInstance("PKCS12");
            own.load(null, null);
            own.setKeyEntry("node", key, password, chain.toArray(Certificate[]::new));
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(own, password);
            KeyStore trusted = KeyStore.getInstance("PKCS12");
            trusted.load(null, null);
            for (int i = 0; i < ca.size(); i++) {
                trusted.setCertificateEntry("ca" + i, ca.get(i));
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trusted);
            SSLContext c = SSLContext.getInstance(PROTOCOL);
            c.init(kmf.getKeyManagers(), tmf.getTrustManagers(), new SecureRandom());
            return new SeedTls(c, chain.get(0).getSubjectX500Principal().getName());
        } catch (GeneralSecurityException | IOException e) {
            throw new IllegalArgumentException("--seed-tls-cert " + certFile + ": this JVM cannot make a " + PROTOCOL
                    + " context of it (" + e + "); use an EC P-256 or RSA certificate", e);
        }
    }

    /** The certificate's subject, for the log. */
    public String subject() {
        return subject;
    }

    /** The context both ends make their engines and sockets from. */
    public SSLContext context() {
        return context;
    }

    /** An engine of the exporter's end: TLS 1.3 only, the peer's certificate required. */
    public SSLEngine serverEngine() {
        SSLEngine e = context.createSSLEngine();
        e.setUseClientMode(false);
        e.setEnabledProtocols(new String[] {PROTOCOL});
        e.setNeedClientAuth(true);
        return e;
    }

    /** What a requester's socket allows: TLS 1.3 only (the exporter's certificate is checked by the context). */
    SSLParameters clientParameters() {
        SSLParameters p = context.getDefaultSSLParameters();
        p.setProtocols(new String[] {PROTOCOL});
        return p;
    }

    private static byte[] pemFile(String flag, Path file) {
        BasicFileAttributes a;
        try {
            a = Files.readAttributes(file, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        } catch (IOException e) {
            throw new IllegalArgumentException(flag + " " + file + ": cannot read it (" + e.getMessage() + ")", e);
        }
        if (!a.isRegularFile()) {
            throw new IllegalArgumentException(flag + " " + file + ": not a regular file" + (a.isSymbolicLink()
                    ? " (a symbolic link, which is not followed)" : ""));
        }
        if (a.size() > MAX_PEM_BYTES) {
            throw new IllegalArgumentException(flag + " " + file + ": " + a.size() + " bytes, over the " + MAX_PEM_BYTES
                    + " a PEM file of certificates may have");
        }
        try {
            byte[] b = Files.readAllBytes(file);
            if (b.length > MAX_PEM_BYTES) {
                throw new IllegalArgumentException(flag + " " + file + ": changed while read: " + b.length + " bytes");
            }
            return b;
        } catch (IOException e) {
            throw new IllegalArgumentException(flag + " " + file + ": cannot read it (" + e.getMessage() + ")", e);
        }
    }

    /** The X.509 certificates of a PEM file: at least one. */
    private static List<X509Certificate> certificates(String flag, Path file) {
        byte[] pem = pemFile(flag, file);
        List<X509Certificate> out = new ArrayList<>();
        try {
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(
                    new ByteArrayInputStream(pem))) {
                out.add((X509Certificate) c);
            }
        } catch (CertificateException e) {
            throw new IllegalArgumentException(flag + " " + file + ": not PEM X.509 certificates (" + e.getMessage()
                    + "); give the '-----BEGIN CERTIFICATE-----' file", e);
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException(flag + " " + file + ": holds no certificate; give the '-----BEGIN"
                    + " CERTIFICATE-----' file");
        }
        return out;
    }

    /** The unencrypted PKCS#8 key of a PEM file, of the algorithm of {@code cert}'s public key. */
    private static PrivateKey privateKey(Path file, byte[] pem, X509Certificate cert) {
        String text = new String(pem, StandardCharsets.US_ASCII);
        String begin = "-----BEGIN PRIVATE KEY-----";
        String end = "-----END PRIVATE KEY-----";
        int b = text.indexOf(begin);
        int e = text.indexOf(end);
        if (b < 0 || e < b) {
            String kind = text.contains("ENCRYPTED PRIVATE KEY") ? "an encrypted key"
                    : text.contains("EC PRIVATE KEY") || text.contains("RSA PRIVATE KEY") ? "a key in the older SEC1"
                            + " or PKCS#1 form" : "no '" + begin + "' block";
            throw new IllegalArgumentException("--seed-tls-key " + file + ": " + kind + "; give an unencrypted PKCS#8"
                    + " key: openssl pkcs8 -topk8 -nocrypt -in " + file + " -out NEW_FILE");
        }
        byte[] der;
        try {
            der = Base64.getMimeDecoder().decode(text.substring(b + begin.length(), e));
        } catch (IllegalArgumentException bad) {
            throw new IllegalArgumentException("--seed-tls-key " + file + ": the key block is not Base64 ("
                    + bad.getMessage() + "); write the key again", bad);
        }
        String algorithm = cert.getPublicKey().getAlgorithm();
        try {
            return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
        } catch (GeneralSecurityException bad) {
            throw new IllegalArgumentException("--seed-tls-key " + file + ": not a PKCS#8 " + algorithm + " key as the"
                    + " certificate's (" + bad.getMessage() + "); give the key the certificate was made for", bad);
        } finally {
            Arrays.fill(der, (byte) 0);
        }
    }

    /** Refuses a key that is not the certificate's: it signs, and the certificate's public key must verify it. */
    private static void matches(PrivateKey key, X509Certificate cert, Path keyFile, Path certFile) {
        String alg = switch (key.getAlgorithm()) {
            case "EC" -> "SHA256withECDSA";
            case "RSA" -> "SHA256withRSA";
            case "EdDSA", "Ed25519" -> "Ed25519";
            default -> throw new IllegalArgumentException("--seed-tls-key " + keyFile + ": a key of algorithm "
                    + key.getAlgorithm() + "; use an EC, RSA or Ed25519 key");
        };
        byte[] probe = SeedAuth.random(32);
        try {
            Signature s = Signature.getInstance(alg);
            s.initSign(key);
            s.update(probe);
            byte[] sig = s.sign();
            Signature v = Signature.getInstance(alg);
            v.initVerify(cert.getPublicKey());
            v.update(probe);
            if (v.verify(sig)) {
                return;
            }
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException("--seed-tls-key " + keyFile + ": cannot sign with it (" + e.getMessage()
                    + "); give the key --seed-tls-cert " + certFile + " was made for", e);
        }
        throw new IllegalArgumentException("--seed-tls-key " + keyFile + " is not the key of --seed-tls-cert "
                + certFile + "; give the key that certificate was made for");
    }

    /** Refuses a chain that does not lead to one of {@code ca} now (dates included; no revocation lists). */
    private static void chainsTo(List<X509Certificate> chain, List<X509Certificate> ca, Path certFile, Path caFile) {
        try {
            Set<TrustAnchor> anchors = new HashSet<>();
            ca.forEach(c -> anchors.add(new TrustAnchor(c, null)));
            PKIXParameters p = new PKIXParameters(anchors);
            p.setRevocationEnabled(false);
            List<X509Certificate> path = new ArrayList<>(chain);
            path.removeIf(c -> anchors.stream().anyMatch(a -> a.getTrustedCert().equals(c)));
            CertPathValidator.getInstance("PKIX").validate(CertificateFactory.getInstance("X.509")
                    .generateCertPath(path), p);
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException("--seed-tls-cert " + certFile + " does not chain to a CA of"
                    + " --seed-tls-ca " + caFile + " (" + e.getMessage() + "); sign it with the fleet's CA, or renew"
                    + " it", e);
        }
    }
}
