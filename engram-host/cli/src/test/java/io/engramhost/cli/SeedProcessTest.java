package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.Expectations;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedWire;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue #29's first slice against real daemon processes on loopback: a daemon fills every table from a peer's
 * daemon and reads none from the disk, byte-equal to the peer's and to the checkpoint; a peer list naming the daemon
 * itself skips it; a peer without the key is refused both ways; a peer serving another checkpoint is skipped for the
 * disk; a peer that sends a wrong byte is caught naming the table and the table refetched, never served; so is a
 * peer that sends other bytes with the same engram digest v1 (an XXH64 collision), by the sha256-tree-v1; a record
 * whose tree digest the disk's bytes do not have either is refused; a peer that dies mid-transfer is finished by
 * another peer or the disk; the key file's checks.
 */
@Timeout(180)
class SeedProcessTest {
    static final ClientOptions QUIET = ClientOptions.defaults().withName("seed-test");
    @TempDir
    static Path shared;
    private static Path model;
    private static Path key;

    @BeforeAll
    static void model() throws Exception {
        model = generate(shared, "m", "42");
        key = keyFile(shared.resolve("key"), 32);
    }

    private static Path generate(Path dir, String name, String seed) throws Exception {
        return generate(dir, name, seed, 20000);
    }

    /** A model directory of {@code rows} rows a layer, in V4.1's layout, with its digest record. */
    static Path generate(Path dir, String name, String seed, int rows) throws Exception {
        Path out = dir.resolve(name);
        CliRun gen = CliRun.of("generate", "--out", out.toString(), "--rows", String.valueOf(rows), "--model", "--seed",
                seed);
        assertEquals(0, gen.exit(), gen.err());
        CliRun w = CliRun.of("inspect", "--write-digests", "--threads", "2", out.toString());
        assertEquals(0, w.exit(), w.err());
        return out;
    }

    static Path keyFile(Path p, int bytes) throws IOException {
        byte[] k = new byte[bytes];
        new java.security.SecureRandom().nextBytes(k);
        Files.write(p, k);
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rw-------"));
        return p;
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    static DaemonProcess serve(Path dir, String name, Path checkpoint, String... seedArgs) throws Exception {
        List<String> args = new java.util.ArrayList<>(List.of("--checkpoint", checkpoint.toString(), "--threads", "2"));
        args.addAll(List.of(seedArgs));
        return DaemonProcess.start(dir.resolve(name + ".sock"), dir.resolve(name + ".log"),
                args.toArray(String[]::new)).awaitReady();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> origin(DaemonProcess d) throws Exception {
        CliRun s = CliRun.of("status", "--socket", d.socket.toString(), "--json");
        assertEquals(0, s.exit(), s.err());
        return (Map<String, Object>) ContentVerifyTest.json(s.out()).get("origin");
    }

    /** Every table's SHA-256 as imported from {@code d}, checked against the checkpoint's bytes. */
    private static Map<String, String> imported(DaemonProcess d) throws Exception {
        return imported(d, model, QUIET);
    }

    /** Every table's SHA-256 as imported from {@code d} with {@code options}, checked against {@code model}'s bytes. */
    static Map<String, String> imported(DaemonProcess d, Path model, ClientOptions options) throws Exception {
        Checkpoint cp = Checkpoint.open(model);
        Map<String, String> out = new TreeMap<>();
        try (ImportedTables t = EngramClient.connect(d.socket, Expectations.ofCheckpoint(List.of(model), List.of(),
                n -> { }), options)) {
            for (TableView v : t.tables().values()) {
                TensorInfo ti = cp.tensor(v.name());
                byte[] b = new byte[Math.toIntExact(ti.length())];
                try (RandomAccessFile raf = new RandomAccessFile(ti.file().toFile(), "r")) {
                    raf.seek(ti.offset());
                    raf.readFully(b);
                }
                assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(b), v.sha256(), v.name());
                out.put(v.name(), java.util.HexFormat.of().formatHex(v.sha256()));
            }
        }
        return out;
    }

    @Test
    void shouldSeedEveryTableFromAPeerReadingNoneFromTheDiskAndSkipItself(@TempDir Path dir) throws Exception {
        int pa = freePort();
        int pb = freePort();
        try (DaemonProcess a = serve(dir, "a", model, "--seed-listen", "127.0.0.1:" + pa, "--seed-key", key.toString());
                DaemonProcess b = serve(dir, "b", model, "--seed-listen", "0.0.0.0:" + pb, "--seed-from",
                        "127.0.0.1:" + pb + ",127.0.0.1:" + pa, "--seed-key", key.toString())) {
            Map<String, Object> o = origin(b);
            assertEquals("seed", o.get("how"), o.toString());
            assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
            @SuppressWarnings("unchecked")
            Map<String, Object> seeded = (Map<String, Object>) o.get("seeded");
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> sources = (List<Map<String, Object>>) seeded.get("sources");
            assertEquals(1, sources.size(), seeded.toString());
            assertEquals("127.0.0.1:" + pa, sources.get(0).get("peer"));
            assertEquals(0L, seeded.get("peers_refused"), "itself is skipped, not refused");
            String log = b.log();
            assertTrue(log.contains("seed: peer 127.0.0.1:" + pb + " is this daemon itself; skipping it"), log);
            assertTrue(log.contains("seed: 4 of 4 tables ("), log);
            assertEquals(imported(a), imported(b), "both daemons serve the same bytes, the checkpoint's");
            // the text status says it was seeded, from whom, and that nothing was read from the checkpoint
            CliRun text = CliRun.of("status", "--socket", b.socket.toString());
            assertEquals(0, text.exit(), text.err());
            String line = text.out().lines().filter(l -> l.startsWith("origin ")).findFirst().orElse("");
            assertTrue(line.matches("origin {5}seeded: [0-9.]+ [KM]iB from 127\\.0\\.0\\.1:" + pa + " \\([0-9.]+ [KM]iB,"
                    + " [0-9.]+ GiB/s\\) in [0-9.]+ s, 0 refused; 0 B read from the checkpoint"), text.out());
            CliRun atext = CliRun.of("status", "--socket", a.socket.toString());
            assertTrue(atext.out().contains("\norigin     loaded from the checkpoint ("), atext.out());
        }
    }

    @Test
    void shouldRefuseAPeerWithoutTheKeyBothWaysAndSkipAnotherCheckpointForTheDisk(@TempDir Path dir)
            throws Exception {
        Path other = generate(dir, "other", "7");
        Path wrongKey = keyFile(dir.resolve("wrong"), 48);
        int pa = freePort();
        int po = freePort();
        int pm = freePort();
        try (DaemonProcess a = serve(dir, "a", model, "--seed-listen", "127.0.0.1:" + pa, "--seed-key", key.toString(),
                "--metrics-port", String.valueOf(pm));
                DaemonProcess o = serve(dir, "o", other, "--seed-listen", "127.0.0.1:" + po, "--seed-key",
                        key.toString())) {
            // the exporter refuses a proof made with another key: ERROR NOT_AUTHENTICATED, then the close
            byte[] back = SeedProxy.wrongProof(new InetSocketAddress("127.0.0.1", pa), SeedKey.read(wrongKey));
            assertEquals(SeedWire.ERROR, back[0]);
            assertEquals(SeedWire.NOT_AUTHENTICATED, ByteBuffer.wrap(back).order(ByteOrder.LITTLE_ENDIAN).getShort(8));
            // a frame longer than any request: refused at its header, before its payload is read
            byte[] big = SeedProxy.rawFrame(new InetSocketAddress("127.0.0.1", pa), SeedWire.HELLO, 1 << 30);
            assertEquals(SeedWire.BAD_REQUEST, ByteBuffer.wrap(big).order(ByteOrder.LITTLE_ENDIAN).getShort(8));
            String alog = a.log();
            assertTrue(alog.contains("refused: did not prove it holds the seed key: its --seed-key file differs from"
                    + " this daemon's; give every node the same --seed-key file"), alog);
            assertTrue(alog.contains("refused: HELLO of 1073741824 bytes: a request has at most 56"), alog);

            // a requester with another key: it refuses the exporter (which cannot prove the requester's key)
            try (DaemonProcess c = serve(dir, "c", model, "--seed-from", "127.0.0.1:" + pa + ",127.0.0.1:" + po,
                    "--seed-key", wrongKey.toString())) {
                Map<String, Object> or = origin(c);
                assertEquals("load", or.get("how"), or.toString());
                CliRun text = CliRun.of("status", "--socket", c.socket.toString());
                assertTrue(text.out().matches("(?s).*\norigin {5}loaded from the checkpoint \\([0-9.]+ [KM]iB read\\);"
                        + " seeding gave 0 B from no peer in [0-9.]+ s, [1-9] refused\n.*"), text.out());
                String log = c.log();
                assertTrue(log.contains("seed: peer 127.0.0.1:" + pa + " does not prove it holds the seed key: its"
                        + " --seed-key file differs from this daemon's; give every node the same --seed-key file (the"
                        + " same bytes); skipping it"), log);
                assertTrue(log.contains("seed: 0 of 4 tables (0 B) from 0 peers"), log);
                assertEquals(imported(a), imported(c));
            }
            // the right key, but a peer serving other bytes under the same names: skipped, the disk loads
            try (DaemonProcess e = serve(dir, "e", model, "--seed-from", "127.0.0.1:" + po, "--seed-key",
                    key.toString())) {
                Map<String, Object> or = origin(e);
                assertEquals("load", or.get("how"), or.toString());
                String log = e.log();
                assertTrue(log.contains("seed: peer 127.0.0.1:" + po + " serves another checkpoint (fingerprint "), log);
                assertEquals(imported(a), imported(e));
            }
            String metrics;
            try (java.io.InputStream in = java.net.URI.create("http://127.0.0.1:" + pm + "/metrics").toURL()
                    .openStream()) {
                metrics = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            }
            assertTrue(metrics.contains("engram_host_seed_peers_refused_total{reason=\"not-authenticated\"} "),
                    metrics);
        }
    }

    @Test
    void shouldCatchALyingPeerNamingTheTableAndFinishWhatADyingPeerLeaves(@TempDir Path dir) throws Exception {
        int pa = freePort();
        SeedKey k = SeedKey.read(key);
        try (DaemonProcess a = serve(dir, "a", model, "--seed-listen", "127.0.0.1:" + pa, "--seed-key", key.toString());
                SeedProxy liar = new SeedProxy(new InetSocketAddress("127.0.0.1", pa), k, SeedProxy.Mode.LIE);
                SeedProxy collider = new SeedProxy(new InetSocketAddress("127.0.0.1", pa), k, SeedProxy.Mode.COLLIDE);
                SeedProxy dying = new SeedProxy(new InetSocketAddress("127.0.0.1", pa), k, SeedProxy.Mode.DIE)) {
            Map<String, String> truth = imported(a);
            // the liar alone: the table it changed is caught and read from the disk; the others come from it
            try (DaemonProcess b = serve(dir, "b", model, "--seed-from", liar.address(), "--seed-key",
                    key.toString())) {
                String log = b.log();
                assertTrue(log.matches("(?s).*seed: table '[^']+' from peer " + java.util.regex.Pattern.quote(
                        liar.address()) + " has engram digest v1 [0-9a-f]{16}, not the record's [0-9a-f]{16};"
                        + " dropping the peer and fetching the table again from another peer or the disk.*"), log);
                Map<String, Object> o = origin(b);
                assertTrue((Long) o.get("checkpoint_bytes_read") > 0, o.toString());
                assertEquals(truth, imported(b), "what is served is the checkpoint's, never the lie");
            }
            // other bytes with the same engram digest v1: only the sha256-tree-v1 tells them apart; the disk agrees
            // with the record, so the table is served from the disk and the load says the peer's bytes were forged
            try (DaemonProcess b = serve(dir, "b2", model, "--seed-from", collider.address(), "--seed-key",
                    key.toString())) {
                assertEquals(1, collider.forged(), "the proxy sent one range of other bytes with the same XXH64");
                String log = b.log();
                java.util.regex.Matcher m = java.util.regex.Pattern.compile("seed: table '([^']+)' from peer "
                        + java.util.regex.Pattern.quote(collider.address()) + " has sha256-tree-v1 [0-9a-f]{64}, not"
                        + " the record's [0-9a-f]{64} \\(its engram digest v1 is the record's\\); dropping the peer and"
                        + " fetching the table again from another peer or the disk").matcher(log);
                assertTrue(m.find(), log);
                assertTrue(log.contains("seed: table '" + m.group(1) + "' read from the disk has the record's"
                        + " sha256-tree-v1: the bytes that peer sent were not the checkpoint's, though made to have"
                        + " its engram digest v1"), log);
                assertTrue((Long) origin(b).get("checkpoint_bytes_read") > 0);
                assertEquals(truth, imported(b), "the forged bytes are never served");
            }
            // a record whose tree digest of one table is wrong (its engram digest v1 right): the peer's bytes fail
            // it, so do the disk's, and the load refuses to serve rather than serve bytes its record disowns
            Path wrong = dir.resolve("wrong-record");
            Files.createDirectories(wrong);
            try (java.util.stream.Stream<Path> files = Files.list(model)) {
                for (Path p : files.toList()) {
                    Files.copy(p, wrong.resolve(p.getFileName()));
                }
            }
            Path record = wrong.resolve("engram-digests.json");
            String table = "layers.14.engram.embed.scale";
            String json = Files.readString(record);
            java.util.regex.Matcher tm = java.util.regex.Pattern.compile("\"" + java.util.regex.Pattern.quote(table)
                    + "\":\\{\"engram-digest-v1\":\"[0-9a-f]{16}\",\"sha256-tree-v1\":\"([0-9a-f]{64})\"").matcher(json);
            assertTrue(tm.find(), json);
            String bad = (tm.group(1).charAt(0) == '0' ? "1" : "0") + tm.group(1).substring(1);
            Files.writeString(record, json.substring(0, tm.start(1)) + bad + json.substring(tm.end(1)));
            CliRun refused = CliRun.of("serve", "--socket", dir.resolve("w.sock").toString(), "--numa", "none",
                    "--checkpoint", wrong.toString(), "--threads", "2", "--seed-from", "127.0.0.1:" + pa,
                    "--seed-key", key.toString());
            assertEquals(1, refused.exit(), refused.err());
            assertTrue(refused.err().contains("seed: table '" + table + "' from peer 127.0.0.1:" + pa + " has"
                    + " sha256-tree-v1 " + tm.group(1) + ", not the record's " + bad), refused.err());
            List<String> err = refused.err().lines().filter(l -> l.startsWith("engram-host serve: ")).toList();
            assertEquals(1, err.size(), refused.err());
            assertTrue(err.get(0).contains(": tensor '" + table + "': its bytes have sha256-tree-v1 " + tm.group(1)
                    + ", but the digest record " + record + " says " + bad + " (checked because a peer sent this table"
                    + " with the record's engram digest v1 but another sha256-tree-v1); refusing to serve it: restore"
                    + " the file, or if it changed on purpose write the record again with engram-host inspect"
                    + " --write-digests " + wrong), err.get(0));
            assertTrue(Files.notExists(dir.resolve("w.sock")), "nothing served");
            // connections reset in the middle of their handshake free their place: 17 of them (one more than may be
            // authenticating at once), then a requester that seeds from A as below
            for (int i = 0; i < 17; i++) {
                try (java.net.Socket s = new java.net.Socket()) {
                    s.connect(new InetSocketAddress("127.0.0.1", pa), 2000);
                    s.getOutputStream().write(new byte[] {SeedWire.HELLO, 0, 0, 0, (byte) SeedWire.HELLO_BYTES, 0});
                    s.getOutputStream().flush();
                    Thread.sleep(20);
                    s.setSoLinger(true, 0); // the close resets the connection
                }
            }
            // a peer that dies in its first range, then a good one: the good one finishes, the disk reads nothing
            try (DaemonProcess c = serve(dir, "c", model, "--seed-from", dying.address() + ",127.0.0.1:" + pa,
                    "--seed-key", key.toString())) {
                String log = c.log();
                // a FIN or, where the dying peer had a request unread (one is asked ahead), a reset
                assertTrue(log.matches("(?s).*seed: peer " + java.util.regex.Pattern.quote(dying.address())
                        + " closed the connection( \\((reset|broken pipe)\\))? during the transfer; its unfinished"
                        + " tables go to another peer or the disk.*"), log);
                Map<String, Object> o = origin(c);
                assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
                assertEquals(truth, imported(c));
            }
            // the dying peer alone: the disk finishes
            try (DaemonProcess d = serve(dir, "d", model, "--seed-from", dying.address(), "--seed-key",
                    key.toString())) {
                Map<String, Object> o = origin(d);
                assertTrue((Long) o.get("checkpoint_bytes_read") > 0, o.toString());
                assertEquals(truth, imported(d));
            }
        }
    }

    @Test
    void shouldRefuseAKeyFileOthersMayReadOrThatIsTooShort(@TempDir Path dir) throws Exception {
        Path loose = keyFile(dir.resolve("loose"), 32);
        Files.setPosixFilePermissions(loose, PosixFilePermissions.fromString("rw-r--r--"));
        CliRun r = CliRun.of("serve", "--socket", dir.resolve("x.sock").toString(), "--checkpoint", model.toString(),
                "--seed-listen", "127.0.0.1:" + freePort(), "--seed-key", loose.toString());
        assertEquals(2, r.exit(), r.err());
        assertTrue(r.err().contains("--seed-key " + loose + ": mode 0644 lets others than its owner at it: chmod 600 "
                + loose), r.err());
        Path shortKey = dir.resolve("short");
        Files.writeString(shortKey, "hunter2\n", StandardCharsets.US_ASCII);
        Files.setPosixFilePermissions(shortKey, PosixFilePermissions.fromString("rw-------"));
        CliRun s = CliRun.of("serve", "--socket", dir.resolve("y.sock").toString(), "--checkpoint", model.toString(),
                "--seed-from", "127.0.0.1:1", "--seed-key", shortKey.toString());
        assertEquals(2, s.exit(), s.err());
        assertTrue(s.err().contains("holds 8 bytes; a key needs 32 to 4096"), s.err());
    }

    /**
     * An exporter of hugetlb memfds sends its ranges out of a read-only mapping (sendfile(2) from hugetlbfs fails with
     * EINVAL). It needs 2 MiB pages: as root it reserves a few for the test and gives them back after; without them
     * it is skipped, saying so.
     */
    @Test
    void shouldSeedFromAnExporterOfHugetlbRegions(@TempDir Path dir) throws Exception {
        Path knob = Path.of("/proc/sys/vm/nr_hugepages");
        long before = pages(knob);
        boolean reserved = false;
        if (before < 32 && Files.isWritable(knob)) {
            reserved = true;
            sysctl(knob, before + 32);
            if (pages(knob) < 32) { // fragmented: compact, then ask again
                sysctl(Path.of("/proc/sys/vm/compact_memory"), 1);
                sysctl(knob, before + 32);
            }
        }
        try {
            long now = pages(knob);
            org.junit.jupiter.api.Assumptions.assumeTrue(now >= 32, "needs 32 huge pages: vm.nr_hugepages is " + now
                    + (reserved ? " after asking for " + (before + 32) + " (memory too short or fragmented)"
                            : " and not writable here"));
            int pa = freePort();
            try (DaemonProcess a = serve(dir, "a", model, "--backend", "memfd-hugetlb",
                    "--seed-listen", "127.0.0.1:" + pa, "--seed-key", key.toString());
                    DaemonProcess b = serve(dir, "b", model, "--seed-from", "127.0.0.1:" + pa, "--seed-key",
                            key.toString())) {
                Map<String, Object> o = origin(b);
                assertEquals("seed", o.get("how"), o.toString());
                assertEquals(0L, o.get("checkpoint_bytes_read"), o.toString());
                assertTrue(b.log().contains("seed: 4 of 4 tables ("), b.log());
                assertEquals(imported(a), imported(b), "the hugetlb exporter's bytes, the checkpoint's");
                assertTrue(!a.log().contains("failed ("), a.log());
            }
        } finally {
            if (reserved) {
                sysctl(knob, before);
            }
        }
    }

    /** Writes {@code value} to a /proc/sys file in one write(2), as sysctl does (a second write would be ignored). */
    private static void sysctl(Path knob, long value) throws IOException {
        try (java.io.FileOutputStream out = new java.io.FileOutputStream(knob.toFile())) {
            out.write((value + "\n").getBytes(StandardCharsets.US_ASCII));
        }
    }

    /** The number in a /proc/sys file (read by lines: {@code Files.readString} of a procfs file can stop short). */
    private static long pages(Path knob) throws IOException {
        return Long.parseLong(Files.readAllLines(knob).get(0).trim());
    }
}
