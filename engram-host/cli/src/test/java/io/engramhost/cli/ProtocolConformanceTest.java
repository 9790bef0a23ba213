package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.json.JsonReader;
import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.NonBlocking;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.protocol.Welcome;
import java.io.EOFException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * docs/protocol.md against a real daemon process, byte by byte, as an independent client author would
 * test it: every refusal's ERROR code, encoding version and message, and whether the connection is then
 * closed or stays usable. One daemon serves every test here (short deadlines: HELLO 500 ms, request
 * 1000 ms, idle 1500 ms); each test uses its own connections and leaves none behind.
 */
@Timeout(60)
class ProtocolConformanceTest {
    static final int HELLO_MS = 500;
    static final int REQUEST_MS = 1000;
    static final int IDLE_MS = 1500;
    /**
     * Tables with long names: enough to push the manifest (and STATUS) past 1 MiB while the structured
     * fingerprint stays under 1 MiB (the size up to which a structured expectation is compared in detail).
     */
    static final int LONG_TABLES = 900;
    static final int SEAL_SEAL = 0x1;
    static final int SEAL_SHRINK = 0x2;
    static final int SEAL_GROW = 0x4;
    static final int SEAL_WRITE = 0x8;
    static final int SEAL_FUTURE_WRITE = 0x10;

    @TempDir
    static Path dir;
    static ConformanceDaemon d;

    static String longName(int i) {
        return String.format("engram.long.%04d.", i) + "x".repeat(1043);
    }

    static Path checkpoint(Path dir) throws Exception {
        SafetensorsWriter w = new SafetensorsWriter();
        Random rnd = new Random(3);
        byte[] small = new byte[16];
        for (int i = 0; i < LONG_TABLES; i++) {
            rnd.nextBytes(small);
            w.add(longName(i), DType.U8, new long[] {16}, small.clone());
        }
        byte[] weight = new byte[64 * 64 * 4];
        rnd.nextBytes(weight);
        w.add("a.weight", DType.F32, new long[] {64, 64}, weight);
        w.add("empty.bf16", DType.BF16, new long[] {0, 16}, new byte[0]);
        w.add("scalar.f32", DType.F32, new long[] {}, new byte[] {1, 2, 3, 4});
        w.add("packed.f4", DType.F4, new long[] {3, 8}, new byte[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
        return w.write(dir.resolve("conformance.safetensors"));
    }

    @BeforeAll
    static void startDaemon() throws Exception {
        d = ConformanceDaemon.start(dir, "c", "--checkpoint", checkpoint(dir).toString(), "--numa", "auto",
                "--hello-timeout-ms", Integer.toString(HELLO_MS), "--request-timeout-ms", Integer.toString(REQUEST_MS),
                "--idle-timeout-ms", Integer.toString(IDLE_MS));
    }

    @AfterAll
    static void stopDaemon() {
        if (d != null) {
            d.close();
        }
    }

    static RawClient connect() throws Exception {
        return RawClient.connect(d.socket);
    }

    static RawClient.Frame frame(int type, int version) {
        return new RawClient.Frame(type, version);
    }

    // ============================================================================================ transport

    @Test
    void theSocketIsPrivateAndTheReadyFileNamesTheDaemon() throws Exception {
        assertEquals("rw-------", java.nio.file.attribute.PosixFilePermissions.toString(
                java.nio.file.Files.getPosixFilePermissions(d.socket)), "mode 0600 without --allow-uid");
        assertEquals("rwx------", java.nio.file.attribute.PosixFilePermissions.toString(
                java.nio.file.Files.getPosixFilePermissions(d.socket.getParent())), "a directory it created: 0700");
        List<String> ready = java.nio.file.Files.readAllLines(io.engramhost.protocol.SocketPaths.readyFile(d.socket));
        assertTrue(ready.contains("pid=" + d.pid()), ready.toString());
        assertTrue(ready.contains("fingerprint=" + d.status().get("fingerprint")), ready.toString());
        assertTrue(ready.contains("backend=memfd"), ready.toString());
        assertTrue(ready.contains("socket=" + d.socket), ready.toString());
    }

    // ============================================================================================ HELLO

    @Test
    void helloWithAClientNameOf4096BytesIsWelcomed() throws Exception {
        try (RawClient c = connect()) {
            byte[] hello = RawClient.hello(1, 2, "n".repeat(4096));
            assertEquals(4114, hello.length, "the largest valid HELLO");
            c.send(hello);
            RawClient.Message m = c.next(5000);
            assertEquals(2, m.type(), "WELCOME: " + m);
            assertEquals(2, m.version());
        }
    }

    @Test
    void helloWithAClientNameOf4097BytesIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.send(RawClient.hello(1, 2, "n".repeat(4097)));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "4114");
        }
    }

    @Test
    void helloWhoseClientLengthSaysMoreThan4096IsRefusedNamingTheField() throws Exception {
        try (RawClient c = connect()) {
            // 4114 bytes in all (within the HELLO limit), but the str16 length claims 4097.
            byte[] hello = frame(1, 1).u16(1).u16(2).i32(1).u16(4097).raw(new byte[4096]).bytes();
            c.send(hello);
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "client", "4097");
        }
    }

    @Test
    void helloWithAClientNameThatIsNotUtf8IsRefusedNamingTheField() throws Exception {
        try (RawClient c = connect()) {
            c.send(frame(1, 1).u16(1).u16(2).i32(1).str16(new byte[] {'a', (byte) 0xC3}).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "client", "UTF-8");
        }
    }

    @Test
    void helloTruncatedIsRefusedNamingTheField() throws Exception {
        try (RawClient c = connect()) {
            c.send(frame(1, 1).u16(1).u16(2).u16(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "pid");
        }
    }

    @Test
    void helloWithTrailingBytesIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.send(frame(1, 1).u16(1).u16(2).i32(1).str16("e").u8(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "trailing");
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {0, 2, 7})
    void helloEncodedAsAnotherVersionThanOneIsRefused(int version) throws Exception {
        try (RawClient c = connect()) {
            c.send(frame(1, version).u16(1).u16(2).i32(1).str16("e").bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "version " + version);
        }
    }

    @Test
    void helloWithMinVersionZeroIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.send(RawClient.hello(0, 2, "e"));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "min_version");
        }
    }

    @Test
    void helloWithMinVersionAboveMaxVersionIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.send(RawClient.hello(2, 1, "e"));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "min_version", "max_version");
        }
    }

    /** STATUS, IMPORT, BYE and WELCOME as a first frame: "anything else first is BAD_REQUEST". */
    @ParameterizedTest
    @ValueSource(ints = {5, 3, 10, 2, 7})
    void aFirstFrameThatIsNotHelloIsRefused(int type) throws Exception {
        try (RawClient c = connect()) {
            byte[] f = type == 3 ? RawClient.importAny(1) : RawClient.empty(type, 1);
            c.send(f);
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "HELLO");
        }
    }

    @Test
    void aFirstMessageOver4114BytesIsRefusedAtTheHeader() throws Exception {
        try (RawClient c = connect()) {
            c.write(RawClient.header(4115, 0)); // and not one payload byte
            long t0 = System.nanoTime();
            c.assertErrorThenClosed(HELLO_MS - 100, ErrorCode.BAD_REQUEST, 1, "4115", "4114");
            assertTrue((System.nanoTime() - t0) / 1_000_000 < HELLO_MS, "refused at the header, before the HELLO deadline");
        }
    }

    @Test
    void aHelloOfExactly4114BytesPassesTheHeaderCheck() throws Exception {
        try (RawClient c = connect()) {
            c.write(RawClient.header(4114, 0));
            // No answer before the payload arrives: the HELLO deadline is what ends it.
            c.assertErrorThenClosed(HELLO_MS + 2000, ErrorCode.TIMED_OUT, 1, "HELLO");
        }
    }

    // ------------------------------------------------------------------------------------ negotiation

    @Test
    void versionOneOnlyIsWelcomedInVersionOneWithoutUid() throws Exception {
        try (RawClient c = connect()) {
            RawClient.Message m = c.handshake(1, 1);
            assertEquals(1, m.version(), "WELCOME encoded as version 1");
            Welcome w = Welcome.decode(m.reader()); // consumes the frame exactly: no uid field
            assertEquals(1, w.version());
            assertEquals(d.pid(), w.pid());
            assertEquals(DaemonState.READY, w.state());
            assertEquals("memfd", w.backend());
            int noUid = 8 + 2 + 4 + 2 + w.daemonVersion().length() + 2 + w.backend().length() + 2 + w.instance().length() + 1;
            assertEquals(noUid, m.payload().length, "version 1 has no uid field");
        }
    }

    @Test
    void versionsOneToTwoAreWelcomedInVersionTwoWithTheDaemonsUid() throws Exception {
        try (RawClient c = connect()) {
            RawClient.Message m = c.handshake(1, 2);
            assertEquals(2, m.version());
            Welcome w = Welcome.decode(m.reader());
            assertEquals(2, w.version());
            assertEquals(d.euid(), w.uid(), "the daemon's effective uid");
            assertEquals(d.pid(), w.pid());
            int uid = ByteBuffer.wrap(m.payload()).order(ByteOrder.LITTLE_ENDIAN).getInt(m.payload().length - 4);
            assertEquals(d.euid(), uid, "u32 uid is the last field");
        }
    }

    @Test
    void versionsTwoToNineAreWelcomedInVersionTwo() throws Exception {
        try (RawClient c = connect()) {
            RawClient.Message m = c.handshake(2, 9);
            assertEquals(2, m.version());
            assertEquals(2, Welcome.decode(m.reader()).version());
        }
    }

    @Test
    void versionsThreeToFiveAreUnsupported() throws Exception {
        try (RawClient c = connect()) {
            c.send(RawClient.hello(3, 5, "future"));
            ErrorReply e = c.assertErrorThenClosed(5000, ErrorCode.UNSUPPORTED_VERSION, 1, "3", "5");
            assertTrue(e.message().contains("1") && e.message().contains("2"), "names the daemon's range: " + e.message());
        }
    }

    @Test
    void afterVersionOneAFrameEncodedAsVersionTwoIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 1);
            c.send(RawClient.empty(5, 2));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "version 2");
        }
    }

    @Test
    void afterVersionTwoAFrameEncodedAsVersionOneIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(RawClient.importAny(1));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "version 1");
        }
    }

    // ============================================================================================ IMPORT

    @Test
    void importWithFlagsOneIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(1).i32(-1).u8(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "flags");
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {-2, 1024, Integer.MIN_VALUE})
    void importNamingNoValidDeviceIsRefused(int device) throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(device).u8(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "device", Integer.toString(device));
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {3, 255})
    void importWithAnUnknownExpectationKindIsRefused(int kind) throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(kind).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "expectation");
        }
    }

    @Test
    void importWithATruncatedSha256IsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(1).raw(new byte[31]).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "sha256");
        }
    }

    @Test
    void importWithTrailingBytesIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 1);
            c.send(frame(3, 1).i32(0).i32(-1).u8(0).u8(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "trailing");
        }
    }

    /** The daemon's structured fingerprint, as a mismatch's ERROR carries it. */
    static byte[] daemonFingerprint() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(1).raw(new byte[32]).bytes());
            RawClient.Joined j = c.nextFrame(5000);
            return ErrorReply.decode(j.reader()).daemonFingerprint();
        }
    }

    @Test
    void aMalformedStructuredExpectationIsABadRequestNamingTheOffset() throws Exception {
        byte[] fp = daemonFingerprint();
        assertTrue(fp.length + 1 <= 1 << 20, "within the size compared in detail: " + fp.length);
        byte[][] bad = {
            "not a fingerprint".getBytes(StandardCharsets.UTF_8),
            Arrays.copyOf(fp, fp.length - 3),
            Arrays.copyOf(fp, fp.length + 1),
            new byte[0],
        };
        for (byte[] b : bad) {
            try (RawClient c = connect()) {
                c.handshake(1, 2);
                c.send(frame(3, 2).i32(0).i32(-1).u8(2).blob32(b).bytes());
                ErrorReply e = c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "byte");
                assertTrue(e.message().matches(".*byte \\d+.*"), "names the byte offset: " + e.message());
            }
        }
    }

    @Test
    void aSha256MismatchLeavesTheConnectionUsable() throws Exception {
        String served = (String) d.status().get("fingerprint");
        byte[] expected = new byte[32];
        Arrays.fill(expected, (byte) 0x5A);
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(1).raw(expected).bytes());
            RawClient.Joined j = c.nextFrame(5000);
            assertEquals(9, j.type());
            assertEquals(2, j.messages().get(0).version());
            ErrorReply e = ErrorReply.decode(j.reader());
            assertEquals(ErrorCode.FINGERPRINT_MISMATCH, e.code());
            assertFalse(e.retryable());
            assertEquals(1, e.details().size(), "with a short expectation, one line: " + e.details());
            String hex = HexFormat.of().formatHex(expected);
            assertTrue(e.details().get(0).contains(hex) && e.details().get(0).contains(served),
                    "the line gives both hashes: " + e.details());
            assertTrue(e.daemonFingerprint().length > 0, "daemon_fingerprint carries the daemon's record");
            assertEquals(served, HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(e.daemonFingerprint())),
                    "its SHA-256 is the fingerprint STATUS gives");
            // Still usable: a second IMPORT is served.
            c.send(RawClient.importAny(2));
            RawClient.Joined m = c.nextFrame(5000);
            assertEquals(4, m.type(), "MANIFEST after a mismatch on the same connection");
            c.send(RawClient.empty(10, 2));
            c.assertClosedWithNothingMore(2000);
        }
    }

    /**
     * "A larger one (up to 16 MiB) is not decoded into lists: its head ... is checked the same way, BAD_REQUEST
     * naming the byte if malformed, and its files and tables must equal the daemon's canonical encoding of them byte
     * for byte"; patterns are not compared, the backend "" is any.
     */
    @Test
    void aStructuredExpectationOverOneMebibyteIsComparedWithoutDecodingItsLists() throws Exception {
        Fingerprint served = Fingerprint.decode(daemonFingerprint());
        List<String> patterns = new ArrayList<>();
        for (int i = 0; i < 70_000; i++) {
            patterns.add(String.format("p%06d*", i)); // patterns only, to pass 1 MiB: a comparison ignores them
        }
        byte[] same = new Fingerprint(served.layoutVersion(), "", patterns, served.files(), served.tables())
                .canonicalBytes();
        assertTrue(same.length > 1 << 20, "over 1 MiB: " + same.length);
        List<Fingerprint.Table> more = new ArrayList<>(served.tables());
        more.add(new Fingerprint.Table("zz.extra", DType.U8, new long[] {1}, 1));
        byte[] other = new Fingerprint(served.layoutVersion(), "", patterns, served.files(), more).canonicalBytes();
        byte[] garbage = new byte[(1 << 20) + 1];
        Arrays.fill(garbage, (byte) 'g');
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(2).blob32(same).bytes());
            assertEquals(4, c.nextFrame(5000).type(), "the daemon's record, any backend, other patterns: MANIFEST");
        }
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(2).blob32(other).bytes());
            ErrorReply e = ErrorReply.decode(c.nextFrame(5000).reader());
            assertEquals(ErrorCode.FINGERPRINT_MISMATCH, e.code(), e.message());
            assertEquals(1, e.details().size(), "one line for the lists: " + e.details());
            assertTrue(e.details().get(0).startsWith("files or tables differ from the daemon's"), e.details().get(0));
            assertTrue(e.daemonFingerprint().length > 0, "daemon_fingerprint either way");
            c.send(RawClient.importAny(2));
            assertEquals(4, c.nextFrame(5000).type(), "still usable: MANIFEST");
        }
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(2).blob32(garbage).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "byte 0", "bad magic");
        }
    }

    @Test
    void aStructuredMismatchListsAtMostOneHundredDifferencesAndCountsTheRest() throws Exception {
        byte[] fp = daemonFingerprint();
        assertTrue(fp.length <= 1 << 20, "this checkpoint's fingerprint is compared in detail: " + fp.length);
        Fingerprint served = Fingerprint.decode(fp);
        List<Fingerprint.Table> tables = new ArrayList<>(served.tables());
        for (int i = 0; i < 150; i++) {
            tables.add(new Fingerprint.Table("zz.extra." + i, DType.U8, new long[] {1}, 1));
        }
        Fingerprint expected = new Fingerprint(served.layoutVersion(), served.backend(), served.patterns(), served.files(),
                tables);
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(-1).u8(2).blob32(expected.canonicalBytes()).bytes());
            ErrorReply e = ErrorReply.decode(c.nextFrame(5000).reader());
            assertEquals(ErrorCode.FINGERPRINT_MISMATCH, e.code(), e.message());
            assertEquals(101, e.details().size(), "100 differences and a count");
            assertEquals("... and 50 more differences", e.details().get(100));
            assertTrue(e.details().get(0).contains("zz.extra."), e.details().get(0));
            for (String line : e.details()) {
                assertTrue(line.getBytes(StandardCharsets.UTF_8).length <= 4096);
            }
            assertArrayEquals(served.canonicalBytes(), e.daemonFingerprint());
            // The same expectation, corrected, is served on the same connection.
            c.send(frame(3, 2).i32(0).i32(-1).u8(2).blob32(served.canonicalBytes()).bytes());
            assertEquals(4, c.nextFrame(5000).type(), "MANIFEST for a matching structured expectation");
        }
    }

    // ============================================================================================ STATUS

    @Test
    void statusWithABodyIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(5, 2).u8(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "body");
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2})
    void statusWorksRepeatedlyOnOneConnection(int version) throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, version);
            for (int i = 0; i < 3; i++) {
                c.send(RawClient.empty(5, version));
                RawClient.Joined j = c.nextFrame(5000);
                assertEquals(6, j.type(), "STATUS_REPLY " + i);
                for (RawClient.Message m : j.messages()) {
                    assertEquals(version, m.version());
                    if (version == 2) {
                        assertTrue(m.payloadLength() <= 1_048_584, "a version-2 message is at most 1,048,584 bytes");
                    }
                }
                if (version == 1) {
                    assertEquals(1, j.messages().size(), "version 1 is never sent in parts");
                } else {
                    assertTrue(j.frame().length > 1_048_584, "this STATUS_REPLY is over 1 MiB: " + j.frame().length);
                    assertTrue(j.messages().size() >= 2, "so version 2 sends it in parts");
                }
                JsonReader.parse(Frames.decodeStatusReply(j.reader()));
            }
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void statusReplyHasTheDocumentedFields() throws Exception {
        Map<String, Object> s = d.status();
        for (String f : List.of("state", "pid", "uid", "version", "protocol", "backend", "instance", "socket", "uptime_s",
                "progress", "fingerprint", "bytes", "regions", "tables", "load", "placement", "leases", "connections")) {
            assertTrue(s.containsKey(f), "STATUS has '" + f + "': " + s.keySet());
        }
        assertEquals("ready", s.get("state"));
        assertEquals(d.pid(), ((Number) s.get("pid")).longValue());
        assertEquals(d.euid(), ((Number) s.get("uid")).intValue());
        assertEquals(List.of(1L, 2L), ((List<Object>) s.get("protocol")).stream().map(o -> ((Number) o).longValue())
                .toList(), "the versions it speaks");
        assertEquals("memfd", s.get("backend"));
        assertEquals(d.socket.toString(), s.get("socket"));
        assertTrue(((String) s.get("fingerprint")).matches("[0-9a-f]{64}"));
        Map<String, Object> progress = ConformanceDaemon.object(s, "progress");
        for (String f : List.of("phase", "bytes_done", "bytes_total")) {
            assertTrue(progress.containsKey(f), "progress has '" + f + "': " + progress);
        }
        List<Object> tables = (List<Object>) s.get("tables");
        assertEquals(LONG_TABLES + 4, tables.size());
        for (Object o : tables) {
            Map<String, Object> t = (Map<String, Object>) o;
            for (String f : List.of("name", "dtype", "shape", "bytes", "backend", "numa_node", "device", "digest")) {
                assertTrue(t.containsKey(f), "a table has '" + f + "': " + t.keySet());
            }
            assertTrue(((String) t.get("digest")).matches("[0-9a-f]{16}"), "digest: 16 hex digits: " + t.get("digest"));
        }
        Map<String, Object> connections = ConformanceDaemon.object(s, "connections");
        for (String f : List.of("open", "leases", "refused_busy", "refused_not_allowed", "evicted", "timed_out",
                "bad_requests")) {
            assertTrue(connections.containsKey(f), "connections has '" + f + "': " + connections.keySet());
        }
        assertTrue(connections.toString().contains("max_connections") && connections.toString().contains("1024"),
                "the limits in force: " + connections);
        assertTrue(((Number) connections.get("open")).intValue() >= 1, "counts this connection");
    }

    // ============================================================================================ BYE

    @ParameterizedTest
    @ValueSource(ints = {1, 2})
    void byeBeforeImportClosesWithoutAnAnswer(int version) throws Exception {
        try (RawClient c = connect()) {
            c.handshake(version, version);
            c.send(RawClient.empty(10, version));
            c.assertClosedWithNothingMore(2000);
        }
    }

    @Test
    void byeWithTrailingBytesIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(10, 2).u8(0).bytes());
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "body");
        }
    }

    /** Opens a lease: HELLO, IMPORT, MANIFEST (this client drops the fds). */
    static RawClient lease(int version) throws Exception {
        RawClient c = connect();
        c.handshake(version, version);
        c.send(RawClient.importAny(version));
        RawClient.Joined m = c.nextFrame(5000);
        assertEquals(4, m.type(), "MANIFEST");
        return c;
    }

    @ParameterizedTest
    @ValueSource(ints = {-1, 0, 1023})
    void anImportForAnyValidDeviceIsServed(int device) throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(frame(3, 2).i32(0).i32(device).u8(0).bytes());
            RawClient.Joined m = c.nextFrame(5000);
            assertEquals(4, m.type(), "MANIFEST for device " + device);
            assertEquals(LONG_TABLES + 4, Manifest.decode(m.reader()).tables().size(), "no device tensors configured");
        }
    }

    @Test
    void closingTheConnectionEndsTheLease() throws Exception {
        int before = d.leases();
        RawClient c = lease(1);
        assertEquals(before + 1, d.leases());
        c.close();
        long deadline = System.nanoTime() + 2_000_000_000L;
        int now = d.leases();
        while (now != before && System.nanoTime() < deadline) {
            Thread.sleep(20);
            now = d.leases();
        }
        assertEquals(before, now, "the lease ended with its connection");
    }

    @ParameterizedTest
    @ValueSource(ints = {5, 3, 7, 10})
    void anythingElseOnALeaseEndsItWithoutAnAnswer(int type) throws Exception {
        int before = d.leases();
        try (RawClient c = lease(2)) {
            assertEquals(before + 1, d.leases(), "STATUS lists the lease");
            // STATUS, IMPORT, STOP, or a BYE with a body: the lease ends, nothing is answered.
            byte[] f = switch (type) {
                case 3 -> RawClient.importAny(2);
                case 10 -> frame(10, 2).u8(0).bytes();
                default -> RawClient.empty(type, 2);
            };
            c.send(f);
            c.assertClosedWithNothingMore(2000);
        }
        assertEquals(before, d.leases(), "the lease ended");
        assertTrue(d.process.isAlive(), "a STOP on a lease does not stop the daemon");
    }

    // ============================================================================================ fds from a client

    static byte[] concat(byte[] a, byte[] b) {
        byte[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    static ErrorReply errorOn(UnixConnection c) {
        FdMessages.Received r = c.receive(1 << 20, 0, 5000);
        FrameReader fr = FrameReader.of(r.payload());
        assertEquals(9, fr.type().code(), "an ERROR");
        return ErrorReply.decode(fr);
    }

    static void assertEof(UnixConnection c) {
        assertThrows(io.engramhost.os.PeerClosedException.class, () -> c.receive(1 << 20, 0, 2000), "closed");
    }

    @Test
    void aMessageCarryingAnFdAnnouncedInItsHeaderIsRefusedAndTheFdNotKept() throws Exception {
        Thread.sleep(100);
        int baseline = d.awaitFds(d.openFds());
        try (UnixConnection c = UnixConnection.connect(d.socket); Fd stray = Posix.memfdCreate("stray", Posix.MFD_CLOEXEC)) {
            c.send(ByteBuffer.wrap(RawClient.hello(1, 2, "with fd")), List.of(stray));
            ErrorReply e = errorOn(c);
            assertEquals(ErrorCode.BAD_REQUEST, e.code(), e.message());
            assertTrue(e.message().contains("fd"), "names the fds: " + e.message());
            assertEof(c);
        }
        assertEquals(baseline, d.awaitFds(baseline), "the daemon keeps no fd of ours");
    }

    @Test
    void aMessageCarryingAnFdItsHeaderDoesNotAnnounceIsRefusedAndTheFdNotKept() throws Exception {
        Thread.sleep(100);
        int baseline = d.awaitFds(d.openFds());
        try (UnixConnection c = UnixConnection.connect(d.socket); Fd stray = Posix.memfdCreate("stray", Posix.MFD_CLOEXEC)) {
            c.send(ByteBuffer.wrap(RawClient.hello(1, 2, "fine")), List.of());
            c.receive(1 << 20, 0, 5000);
            int during = d.openFds();
            // STATUS whose header says fd_count 0, with an fd riding on its first byte anyway.
            byte[] m = RawClient.message(RawClient.empty(5, 2));
            NonBlocking.Scratch scratch = new NonBlocking.Scratch(4096);
            assertEquals(m.length, NonBlocking.send(c.rawFd(), scratch, m, 0, m.length, new int[] {stray.get()}));
            ErrorReply e = errorOn(c);
            assertEquals(ErrorCode.BAD_REQUEST, e.code(), e.message());
            assertTrue(e.message().contains("fd"), "names the fds: " + e.message());
            assertEof(c);
            assertTrue(d.awaitFds(baseline) <= during, "");
        }
        assertEquals(baseline, d.awaitFds(baseline), "the daemon keeps no fd of ours");
    }

    // ============================================================================================ framing errors

    /** Unknown types, reserved ones, the daemon's own types and a second HELLO, after the handshake. */
    @ParameterizedTest
    @ValueSource(ints = {0, 1, 2, 4, 6, 8, 9, 11, 12, 17, 18, 19, 20, 21, 22, 31, 0x8005, 0xFFFF})
    void anUnknownOrForbiddenTypeIsRefused(int type) throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.send(RawClient.empty(type, 2));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "type");
        }
    }

    @Test
    void aBadMagicIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            byte[] f = RawClient.empty(5, 2);
            f[3] = 'X';
            c.send(f);
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "magic");
        }
    }

    @Test
    void aBadMagicFirstIsRefused() throws Exception {
        try (RawClient c = connect()) {
            byte[] f = RawClient.hello(1, 2, "e");
            f[0] = 'X';
            c.send(f);
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 1, "magic");
        }
    }

    @Test
    void aMessageShorterThanAFrameHeaderIsRefused() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.write(concat(RawClient.header(4, 0), new byte[] {1, 2, 3, 4}));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2);
        }
    }

    @Test
    void aPayloadLengthThatLiesTimesOutAfterTheRequestTimeout() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            byte[] f = RawClient.importAny(2);
            c.write(RawClient.header(100, 0)).write(Arrays.copyOf(f, 10));
            long t0 = System.nanoTime();
            c.assertErrorThenClosed(REQUEST_MS + 3000, ErrorCode.TIMED_OUT, 2, "request");
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= REQUEST_MS - 100, "not before the request timeout: " + ms + " ms");
        }
    }

    @Test
    void aPayloadOverTheRequestLimitIsRefusedAtTheHeader() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.write(RawClient.header(16_842_753, 0));
            c.assertErrorThenClosed(REQUEST_MS / 2, ErrorCode.BAD_REQUEST, 2, "16842753", "16842752");
        }
    }

    @Test
    void aPayloadAtTheRequestLimitPassesTheHeaderCheck() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.write(RawClient.header(16_842_752, 0));
            c.assertErrorThenClosed(REQUEST_MS + 3000, ErrorCode.TIMED_OUT, 2, "request");
        }
    }

    @Test
    void aStatusWhoseMessageIsLongerThanEightBytesIsRefusedOnceTheFrameHeaderIsIn() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.write(concat(RawClient.header(1000, 0), RawClient.empty(5, 2))); // 992 more bytes announced, never sent
            long t0 = System.nanoTime();
            c.assertErrorThenClosed(REQUEST_MS / 2, ErrorCode.BAD_REQUEST, 2, "body");
            assertTrue((System.nanoTime() - t0) / 1_000_000 < REQUEST_MS, "refused without waiting for the rest");
        }
    }

    @Test
    void anAnnouncedFdCountIsRefusedAtTheHeader() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            c.write(concat(RawClient.header(8, 1), RawClient.empty(5, 2)));
            c.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "fd");
        }
    }

    // ============================================================================================ deadlines

    @Test
    void aSilentConnectionTimesOutNamingHello() throws Exception {
        try (RawClient c = connect()) {
            long t0 = System.nanoTime();
            c.assertErrorThenClosed(HELLO_MS + 3000, ErrorCode.TIMED_OUT, 1, "HELLO");
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= HELLO_MS - 100, "not before the HELLO timeout: " + ms + " ms");
        }
    }

    @Test
    void aTricklingHelloTimesOutFromConnect() throws Exception {
        try (RawClient c = connect()) {
            long t0 = System.nanoTime();
            byte[] m = RawClient.message(RawClient.hello(1, 2, "slow"));
            for (int i = 0; i < 5; i++) {
                c.write(new byte[] {m[i]});
                Thread.sleep(HELLO_MS / 5);
            }
            c.assertErrorThenClosed(3000, ErrorCode.TIMED_OUT, 1, "HELLO");
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < HELLO_MS + 1000, "the HELLO deadline runs from connect: " + ms + " ms");
        }
    }

    @Test
    void anIdleConnectionTimesOutNamingIdle() throws Exception {
        try (RawClient c = connect()) {
            c.handshake(1, 2);
            long t0 = System.nanoTime();
            c.assertErrorThenClosed(IDLE_MS + 3000, ErrorCode.TIMED_OUT, 2, "idle");
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= IDLE_MS - 100, "not before the idle timeout: " + ms + " ms");
        }
    }

    @Test
    void aClientThatNeverReadsALargeAnswerIsClosedAfterTheRequestTimeout() throws Exception {
        long timedOut = ((Number) ConformanceDaemon.object(d.status(), "connections").get("timed_out")).longValue();
        try (RawClient c = connect()) {
            c.handshake(1, 1);
            c.send(RawClient.importAny(1)); // a manifest of more than 1 MiB, more than the socket holds
            Thread.sleep(REQUEST_MS + 700);
            // Now read: what was buffered comes, then the end, before the whole manifest.
            RawClient.Message m;
            try {
                m = c.next(3000);
            } catch (EOFException e) {
                m = null;
            }
            if (m != null) {
                throw new AssertionError("the whole answer arrived although it was not taken in time: " + m);
            }
        }
        long after = ((Number) ConformanceDaemon.object(d.status(), "connections").get("timed_out")).longValue();
        assertTrue(after > timedOut, "counted in connections.timed_out: " + timedOut + " -> " + after);
        assertTrue(d.process.isAlive());
    }

    // ============================================================================================ MANIFEST

    /** Every message of one frame with the fds that came with each (version 2: parts). */
    record Received(List<FdMessages.Received> messages) implements AutoCloseable {
        byte[] frame() {
            byte[] first = bytes(messages.get(0).payload());
            if (messages.size() == 1) {
                return first;
            }
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            out.write(first, 0, 6);
            int type = ByteBuffer.wrap(first).order(ByteOrder.LITTLE_ENDIAN).getShort(6) & 0x7FFF;
            out.write(type & 0xff);
            out.write(type >>> 8);
            out.write(first, 8, first.length - 8);
            for (int i = 1; i < messages.size(); i++) {
                byte[] p = bytes(messages.get(i).payload());
                out.write(p, 8, p.length - 8);
            }
            return out.toByteArray();
        }

        List<Fd> fds() {
            List<Fd> all = new ArrayList<>();
            messages.forEach(m -> all.addAll(m.fds()));
            return all;
        }

        @Override
        public void close() {
            fds().forEach(Fd::close);
        }
    }

    static byte[] bytes(ByteBuffer b) {
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return a;
    }

    static int rawType(byte[] payload) {
        return ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN).getShort(6) & 0xffff;
    }

    static Received importWithFds(UnixConnection c, int version) {
        c.send(ByteBuffer.wrap(RawClient.hello(version, version, "fds")), List.of());
        c.receive(1 << 20, 0, 5000);
        c.send(ByteBuffer.wrap(RawClient.importAny(version)), List.of());
        List<FdMessages.Received> messages = new ArrayList<>();
        FdMessages.Received m = c.receive(64 << 20, 65536, 5000);
        messages.add(m);
        while ((rawType(bytes(messages.get(messages.size() - 1).payload())) & 0x8000) != 0) {
            messages.add(c.receive(64 << 20, 65536, 5000));
        }
        return new Received(messages);
    }

    @Test
    void aVersionTwoClientGetsALargeManifestInPartsWithTheFdsOnTheFirstMessage() throws Exception {
        try (UnixConnection c2 = UnixConnection.connect(d.socket); Received v2 = importWithFds(c2, 2);
                UnixConnection c1 = UnixConnection.connect(d.socket); Received v1 = importWithFds(c1, 1)) {
            assertTrue(v2.messages().size() >= 2, "a manifest of over 1 MiB comes in 2 or more messages: "
                    + v2.messages().size());
            byte[] first = bytes(v2.messages().get(0).payload());
            assertEquals(4 | 0x8000, rawType(first), "MANIFEST with the continued bit");
            assertEquals(1_048_584, first.length, "the first message holds 1 MiB of body");
            Manifest m2 = Manifest.decode(FrameReader.of(v2.frame()));
            assertEquals(m2.regions().size(), v2.messages().get(0).fds().size(), "every fd on the first message");
            for (int i = 1; i < v2.messages().size(); i++) {
                byte[] p = bytes(v2.messages().get(i).payload());
                boolean last = i == v2.messages().size() - 1;
                assertEquals(11 | (last ? 0 : 0x8000), rawType(p), "PART " + i);
                assertEquals(2, ByteBuffer.wrap(p).order(ByteOrder.LITTLE_ENDIAN).getShort(4), "PART " + i + " version");
                assertEquals(0, v2.messages().get(i).fds().size(), "parts carry no fds");
                assertTrue(p.length - 8 >= 1 && p.length <= 1_048_584, "PART " + i + " of " + p.length + " bytes");
            }

            assertEquals(1, v1.messages().size(), "version 1: the manifest whole, in one message");
            byte[] whole = bytes(v1.messages().get(0).payload());
            assertTrue(whole.length > 1_048_584, "over 1 MiB: " + whole.length);
            assertEquals(4, rawType(whole));
            assertEquals(1, ByteBuffer.wrap(whole).order(ByteOrder.LITTLE_ENDIAN).getShort(4));
            Manifest m1 = Manifest.decode(FrameReader.of(whole));
            assertEquals(m1.regions().size(), v1.messages().get(0).fds().size());
            assertArrayEquals(Arrays.copyOfRange(whole, 8, whole.length), Arrays.copyOfRange(v2.frame(), 8, whole.length),
                    "the same body in both versions");
            assertEquals(m1.tables(), m2.tables());
            assertEquals(m1.regions(), m2.regions());
        }
    }

    @Test
    void theManifestDescribesTablesAndRegionsAsDocumented() throws Exception {
        int page = (int) Posix.pageSize();
        try (UnixConnection c = UnixConnection.connect(d.socket); Received r = importWithFds(c, 2)) {
            Manifest m = Manifest.decode(FrameReader.of(r.frame()));
            List<Fd> fds = r.fds();
            assertEquals(m.regions().size(), fds.size(), "fd count equals region_count");
            assertEquals(HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(m.fingerprint())),
                    HexFormat.of().formatHex(m.fingerprintSha256()), "fingerprint_sha256 is the SHA-256 of fingerprint");
            for (int i = 0; i < fds.size(); i++) {
                Manifest.Region region = m.regions().get(i);
                assertEquals(RegionKind.MEMFD, region.kind());
                assertEquals(-1, region.device());
                assertTrue(region.size() > 0 && region.size() % page == 0, "a whole number of pages: " + region.size());
                int seals = Posix.getSeals(fds.get(i));
                int need = SEAL_SEAL | SEAL_SHRINK | SEAL_GROW;
                assertEquals(need, seals & need, "seals of region " + i + ": 0x" + Integer.toHexString(seals));
                assertTrue((seals & (SEAL_WRITE | SEAL_FUTURE_WRITE)) != 0, "a write seal on region " + i);
            }
            List<String> names = m.tables().stream().map(Manifest.Table::name).toList();
            List<String> sorted = new ArrayList<>(names);
            sorted.sort(null);
            assertEquals(sorted, names, "tables in name order");
            assertEquals(names.size(), new java.util.HashSet<>(names).size(), "names unique");
            assertEquals(LONG_TABLES + 4, names.size());
            for (Manifest.Table t : m.tables()) {
                DType dt = DType.parse(t.dtype());
                assertEquals(dt.byteLength(t.shape()), t.bytes(), "bytes of " + t.name());
                assertEquals(RegionKind.MEMFD, t.kind());
                assertEquals(-1, t.device());
                if (t.bytes() == 0) {
                    assertEquals(-1, t.region(), "an empty table has region -1");
                    assertEquals(0, t.offset(), "an empty table has offset 0");
                    assertEquals(-1, t.numaNode(), "an empty table's node is -1");
                } else {
                    Manifest.Region region = m.regions().get(t.region());
                    assertEquals(region.numaNode(), t.numaNode(), "the region's node: " + t.name());
                    assertEquals(0, t.offset() % page, "packed at a page boundary: " + t);
                    assertTrue(t.offset() + t.bytes() <= region.size(), "inside its region: " + t);
                }
            }
            Manifest.Table empty = m.tables().stream().filter(t -> t.name().equals("empty.bf16")).findFirst().orElseThrow();
            assertEquals(0, empty.bytes());
            Manifest.Table scalar = m.tables().stream().filter(t -> t.name().equals("scalar.f32")).findFirst()
                    .orElseThrow();
            assertEquals(0, scalar.shape().length, "rank 0 for a scalar");
            assertEquals(4, scalar.bytes());
            Manifest.Table packed = m.tables().stream().filter(t -> t.name().equals("packed.f4")).findFirst().orElseThrow();
            assertEquals(12, packed.bytes(), "sub-byte dtypes pack exactly: 24 x 4 bits are 12 bytes");
            // With --numa auto the regions here sit on node 0, so the empty table's -1 is not merely everyone's -1.
        }
    }
}
