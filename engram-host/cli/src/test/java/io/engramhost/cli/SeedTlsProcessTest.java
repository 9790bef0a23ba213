package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedTls;
import io.engramhost.seed.SeedWire;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Seeding over TLS 1.3 between real daemon processes (issue #29's optional TLS): a daemon seeds every table from a
 * TLS exporter through a relay in the test that records what crosses the wire, and no window of the tables' bytes
 * is in the recording; the exporter refuses a peer that speaks no TLS and one whose certificate another CA signed;
 * and the flags' checks at the start. Certificates are made by the JDK's keytool (an EC P-256 CA and node).
 */
@Timeout(180)
class SeedTlsProcessTest {
    private static final String PASS = "changeit";

    /** keytool of the JDK running the tests. */
    private static void keytool(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "keytool")
                .toString()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = CliRun.read(p.getInputStream());
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "keytool did not finish");
        assertEquals(0, p.exitValue(), String.join(" ", cmd) + ": " + out);
    }

    /** An EC P-256 key pair in {@code dir/name.p12}; self-signed, a CA when {@code ca}. */
    private static void keyPair(Path dir, String name, boolean ca) throws Exception {
        List<String> a = new ArrayList<>(List.of("-genkeypair", "-alias", name, "-keyalg", "EC", "-groupname",
                "secp256r1", "-dname", "CN=" + name, "-validity", "2", "-keystore", dir.resolve(name + ".p12")
                        .toString(), "-storetype", "PKCS12", "-storepass", PASS, "-keypass", PASS));
        if (ca) {
            a.addAll(List.of("-ext", "bc:c"));
        }
        keytool(a.toArray(String[]::new));
    }

    /** {@code name}'s private key as unencrypted PKCS#8 PEM, mode 0600. */
    private static Path keyPem(Path dir, String name) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(dir.resolve(name + ".p12"))) {
            ks.load(in, PASS.toCharArray());
        }
        PrivateKey k = (PrivateKey) ks.getKey(name, PASS.toCharArray());
        Path out = dir.resolve(name + ".key");
        Files.writeString(out, "-----BEGIN PRIVATE KEY-----\n" + Base64.getMimeEncoder(64, new byte[] {'\n'})
                .encodeToString(k.getEncoded()) + "\n-----END PRIVATE KEY-----\n", StandardCharsets.US_ASCII);
        Files.setPosixFilePermissions(out, PosixFilePermissions.fromString("rw-------"));
        return out;
    }

    /** A TCP relay to {@code upstream} that records every byte the upstream sends back. */
    private static final class RecordingRelay implements AutoCloseable {
        final ServerSocket listener = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
        final ByteArrayOutputStream fromUpstream = new ByteArrayOutputStream();
        final List<Socket> open = new ArrayList<>();

        RecordingRelay(InetSocketAddress upstream) throws IOException {
            Thread t = new Thread(() -> {
                while (!listener.isClosed()) {
                    try {
                        Socket down = listener.accept();
                        Socket up = new Socket();
                        up.connect(upstream, 2000);
                        synchronized (open) {
                            open.add(down);
                            open.add(up);
                        }
                        pump(down.getInputStream(), up.getOutputStream(), null);
                        pump(up.getInputStream(), down.getOutputStream(), fromUpstream);
                    } catch (IOException e) {
                        return;
                    }
                }
            }, "recording-relay");
            t.setDaemon(true);
            t.start();
        }

        private static void pump(InputStream in, OutputStream out, ByteArrayOutputStream record) {
            Thread t = new Thread(() -> {
                byte[] b = new byte[64 << 10];
                try (in; out) {
                    for (int n; (n = in.read(b)) > 0; ) {
                        if (record != null) {
                            synchronized (record) {
                                record.write(b, 0, n);
                            }
                        }
                        out.write(b, 0, n);
                    }
                } catch (IOException e) {
                    // one side closed
                }
            }, "recording-relay-pump");
            t.setDaemon(true);
            t.start();
        }

        String address() {
            return "127.0.0.1:" + listener.getLocalPort();
        }

        byte[] recorded() {
            synchronized (fromUpstream) {
                return fromUpstream.toByteArray();
            }
        }

        @Override
        public void close() throws IOException {
            listener.close();
            synchronized (open) {
                for (Socket s : open) {
                    s.close();
                }
            }
        }
    }

    private static boolean contains(byte[] hay, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= hay.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    @Test
    void shouldSeedOverTlsWithNoTableByteInTheClearAndRefusePeersWithoutTheFleetsCertificate(@TempDir Path dir)
            throws Exception {
        keyPair(dir, "fleet-ca", true);
        keytool("-exportcert", "-rfc", "-alias", "fleet-ca", "-keystore", dir.resolve("fleet-ca.p12").toString(),
                "-storepass", PASS, "-file", dir.resolve("ca.pem").toString());
        keyPair(dir, "node", false);
        keytool("-certreq", "-alias", "node", "-keystore", dir.resolve("node.p12").toString(), "-storepass", PASS,
                "-file", dir.resolve("node.csr").toString());
        keytool("-gencert", "-rfc", "-alias", "fleet-ca", "-keystore", dir.resolve("fleet-ca.p12").toString(),
                "-storepass", PASS, "-infile", dir.resolve("node.csr").toString(), "-outfile",
                dir.resolve("node.pem").toString(), "-validity", "2");
        keyPair(dir, "outsider", false);
        keytool("-exportcert", "-rfc", "-alias", "outsider", "-keystore", dir.resolve("outsider.p12").toString(),
                "-storepass", PASS, "-file", dir.resolve("outsider.pem").toString());
        Path ca = dir.resolve("ca.pem");
        Path cert = dir.resolve("node.pem");
        Path key = keyPem(dir, "node");
        Path outsiderKey = keyPem(dir, "outsider");
        Path outsider = dir.resolve("outsider.pem");

        // the flags' checks, where they enter: each one line naming the flag and the fix
        IllegalArgumentException wrongKey = assertThrows(IllegalArgumentException.class,
                () -> SeedTls.read(cert, outsiderKey, ca));
        assertEquals("--seed-tls-key " + outsiderKey + " is not the key of --seed-tls-cert " + cert + "; give the key"
                + " that certificate was made for", wrongKey.getMessage());
        IllegalArgumentException foreign = assertThrows(IllegalArgumentException.class,
                () -> SeedTls.read(outsider, outsiderKey, ca));
        assertTrue(foreign.getMessage().startsWith("--seed-tls-cert " + outsider + " does not chain to a CA of"
                + " --seed-tls-ca " + ca + " ("), foreign.getMessage());
        Files.setPosixFilePermissions(outsiderKey, PosixFilePermissions.fromString("rw-r--r--"));
        IllegalArgumentException loose = assertThrows(IllegalArgumentException.class,
                () -> SeedTls.read(outsider, outsiderKey, outsider));
        assertEquals("--seed-tls-key " + outsiderKey + ": mode 0644 lets others than its owner at it: chmod 600 "
                + outsiderKey, loose.getMessage());
        Files.setPosixFilePermissions(outsiderKey, PosixFilePermissions.fromString("rw-------"));

        Path model = SeedProcessTest.generate(dir, "m", "42", 20000);
        Path seedKey = SeedProcessTest.keyFile(dir.resolve("seed.key"), 32);
        CliRun half = CliRun.of("serve", "--socket", dir.resolve("h.sock").toString(), "--checkpoint",
                model.toString(), "--seed-from", "127.0.0.1:1", "--seed-key", seedKey.toString(), "--seed-tls-cert",
                cert.toString());
        assertEquals(2, half.exit(), half.err());
        assertTrue(half.err().contains("seeding over TLS needs all three of --seed-tls-cert, --seed-tls-key and"
                + " --seed-tls-ca; missing: --seed-tls-key, --seed-tls-ca"), half.err());

        String[] tls = {"--seed-key", seedKey.toString(), "--seed-tls-cert", cert.toString(), "--seed-tls-key",
            key.toString(), "--seed-tls-ca", ca.toString()};
        int pa = SeedProcessTest.freePort();
        List<String> aArgs = new ArrayList<>(List.of("--seed-listen", "127.0.0.1:" + pa));
        aArgs.addAll(List.of(tls));
        try (DaemonProcess a = SeedProcessTest.serve(dir, "a", model, aArgs.toArray(String[]::new));
                RecordingRelay relay = new RecordingRelay(new InetSocketAddress("127.0.0.1", pa))) {
            assertTrue(a.log().contains("seed: exporting the tables to authenticated peers on 127.0.0.1:" + pa + " ("),
                    a.log());
            assertTrue(a.log().contains(", TLS 1.3 as CN=node)"), a.log());
            List<String> bArgs = new ArrayList<>(List.of("--seed-from", relay.address()));
            bArgs.addAll(List.of(tls));
            Map<String, String> served;
            try (DaemonProcess b = SeedProcessTest.serve(dir, "b", model, bArgs.toArray(String[]::new))) {
                Map<String, Object> o = SeedProcessTest.origin(b);
                assertEquals("seed", o.get("how"), o.toString());
                assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
                assertTrue(b.log().contains("seed: 4 of 4 tables ("), b.log());
                served = SeedProcessTest.imported(a, model, SeedProcessTest.QUIET);
                assertEquals(served, SeedProcessTest.imported(b, model, SeedProcessTest.QUIET),
                        "the checkpoint's bytes, both");
            }
            byte[] wire = relay.recorded();
            Checkpoint cp = Checkpoint.open(model);
            long tables = 0;
            for (String name : served.keySet()) {
                TensorInfo t = cp.tensor(name);
                tables += t.length();
                try (RandomAccessFile f = new RandomAccessFile(t.file().toFile(), "r")) {
                    for (long at : new long[] {0, t.length() / 2, t.length() - 48}) {
                        byte[] window = new byte[48];
                        f.seek(t.offset() + at);
                        f.readFully(window);
                        assertTrue(!contains(wire, window), "table '" + t.name() + "' at " + at + " crossed the wire"
                                + " in the clear");
                    }
                }
            }
            assertTrue(wire.length > tables, "every table crossed the relay: " + wire.length + " bytes for "
                    + tables);

            // a peer that speaks no TLS: the exporter closes the connection, answering nothing in the clear
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", pa), 2000);
                s.setSoTimeout(10_000);
                ByteBuffer hello = SeedWire.frame(SeedWire.HELLO, SeedWire.HELLO_BYTES);
                hello.putInt(SeedWire.MAGIC).putShort((short) SeedWire.VERSION).putShort((short) 0)
                        .put(SeedAuth.random(SeedAuth.NONCE_BYTES)).put(SeedAuth.random(SeedAuth.ID_BYTES));
                s.getOutputStream().write(hello.array());
                assertEquals(-1, s.getInputStream().read(), "closed without an answer");
            }
            // a peer whose certificate another CA signed (it trusts the fleet's CA): refused by the exporter
            SSLContext other = SSLContext.getInstance("TLSv1.3");
            KeyStore own = KeyStore.getInstance("PKCS12");
            try (InputStream in = Files.newInputStream(dir.resolve("outsider.p12"))) {
                own.load(in, PASS.toCharArray());
            }
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(own, PASS.toCharArray());
            KeyStore trust = KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            try (InputStream in = Files.newInputStream(ca)) {
                trust.setCertificateEntry("ca", java.security.cert.CertificateFactory.getInstance("X.509")
                        .generateCertificate(in));
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
            other.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            try (SSLSocket s = (SSLSocket) other.getSocketFactory().createSocket()) {
                s.connect(new InetSocketAddress("127.0.0.1", pa), 2000);
                s.setSoTimeout(10_000);
                assertThrows(SSLException.class, () -> {
                    s.startHandshake(); // TLS 1.3: the exporter's refusal of the certificate may come at the read
                    s.getInputStream().read();
                });
            }
            String fix = "; a peer needs --seed-tls-cert, --seed-tls-key and --seed-tls-ca too, its certificate signed"
                    + " by this daemon's CA";
            String both = "(?s).*peer 127\\.0\\.0\\.1:\\d+ refused: it does not speak TLS" + java.util.regex.Pattern
                    .quote(fix) + ".*peer 127\\.0\\.0\\.1:\\d+ refused: its TLS handshake failed \\([^\n]+\\)"
                    + java.util.regex.Pattern.quote(fix) + ".*";
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (!a.log().matches(both) && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
            assertTrue(a.log().matches(both), a.log());
        }
    }
}
