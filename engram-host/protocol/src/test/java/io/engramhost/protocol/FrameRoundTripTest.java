package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Every frame type of docs/protocol.md: the codec writes exactly the documented bytes (compared with
 * a frame built field by field from the document), and decoding gives back what was encoded.
 */
class FrameRoundTripTest {

    static byte[] array(ByteBuffer b) {
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return a;
    }

    /**
     * A frame of some MiB, fields of every width falling across the writer's chunks and blobs larger than one: the
     * same bytes as built field by field, and read back in order.
     */
    @Test
    void shouldWriteAFrameOfManyChunksExactly() {
        FrameWriter w = new FrameWriter(MessageType.STATUS_REPLY, 2);
        Wire expected = Wire.frame(MessageType.STATUS_REPLY, 2);
        byte[] big = new byte[(3 << 20) + 5];
        for (int j = 0; j < big.length; j++) {
            big[j] = (byte) (j * 31 + (j >> 16));
        }
        for (int i = 0; i < 150_000; i++) {
            w.u8(i & 0xff).u16(i & 0xffff).i32(i).i64(-i);
            expected.u8(i & 0xff).u16(i & 0xffff).i32(i).i64(-i);
            if (i % 50_000 == 7) {
                w.blob(big).shortString("s" + i);
                expected.blob32(big).str16("s" + i);
            }
        }
        byte[] frame = w.toArray();
        assertArrayEquals(expected.bytes(), frame);
        FrameReader r = FrameReader.of(frame);
        for (int i = 0; i < 150_000; i++) {
            assertEquals(i & 0xff, r.u8("u8"));
            assertEquals(i & 0xffff, r.u16("u16"));
            assertEquals(i, r.i32("i32"));
            assertEquals(-i, r.i64("i64"));
            if (i % 50_000 == 7) {
                assertArrayEquals(big, r.blob("blob", ProtocolDescriptor.MAX_PAYLOAD));
                assertEquals("s" + i, r.shortString("s"));
            }
        }
        r.end();
    }

    @Test
    void magicIsEgrmInByteOrder() {
        assertEquals(0x4D524745, ProtocolDescriptor.MAGIC);
        assertArrayEquals(new byte[] {'E', 'G', 'R', 'M'}, java.util.Arrays.copyOf(Wire.frame(1, 1).bytes(), 4));
    }

    @Test
    void typeCodesAreTheDocumentedOnes() {
        String[] names = {"HELLO", "WELCOME", "IMPORT", "MANIFEST", "STATUS", "STATUS_REPLY", "STOP", "STOP_ACK", "ERROR",
            "BYE", "PART"};
        for (int i = 0; i < names.length; i++) {
            assertEquals(i + 1, MessageType.valueOf(names[i]).code(), names[i]);
            assertEquals(MessageType.valueOf(names[i]), MessageType.of(i + 1));
        }
    }

    // ------------------------------------------------------------------------------------ HELLO

    @ParameterizedTest
    @ValueSource(strings = {"", "engine", "ünïcødé 名前", "x"})
    void helloRoundTrip(String name) {
        Hello h = new Hello(1, 2, 4242, name);
        byte[] wire = Wire.frame(1, 1).u16(1).u16(2).i32(4242).str16(name).bytes();
        assertArrayEquals(wire, array(h.encode()), "HELLO is encoded as version 1, field by field");
        assertEquals(h, Hello.decode(FrameReader.of(wire)));
    }

    @Test
    void helloWithTheLongestNameIsTheLargestHello() {
        Hello h = new Hello(1, 65535, -1, Wire.ascii(4096, 'n'));
        byte[] wire = array(h.encode());
        assertEquals(4114, wire.length, "the largest valid HELLO is 4,114 bytes");
        assertEquals(4114, ProtocolDescriptor.MAX_HELLO);
        assertEquals(h, Hello.decode(FrameReader.of(wire)));
    }

    // ------------------------------------------------------------------------------------ WELCOME

    static Stream<Arguments> welcomes() {
        List<Arguments> out = new ArrayList<>();
        for (DaemonState s : DaemonState.values()) {
            out.add(Arguments.of(new Welcome(1, 77, "0.1.0", "memfd", "default", s, -1)));
            out.add(Arguments.of(new Welcome(2, 77, "0.1.0", "cuda-vmm", "inst.a_b-c", s, 1000)));
        }
        out.add(Arguments.of(new Welcome(2, Integer.MAX_VALUE, "", "memfd-hugetlb", "", DaemonState.READY, 0)));
        return out.stream();
    }

    @ParameterizedTest
    @MethodSource("welcomes")
    void welcomeRoundTrip(Welcome w) {
        Wire b = Wire.frame(2, w.version()).u16(w.version()).i32(w.pid()).str16(w.daemonVersion()).str16(w.backend())
                .str16(w.instance()).u8(w.state().code());
        if (w.version() == 2) {
            b.i32(w.uid()); // version 2 only: u32 uid
        }
        assertArrayEquals(b.bytes(), array(w.encode()));
        assertEquals(w, Welcome.decode(FrameReader.of(b.bytes())));
    }

    @Test
    void welcomeStateCodes() {
        assertEquals(0, DaemonState.LOADING.code());
        assertEquals(1, DaemonState.READY.code());
        assertEquals(2, DaemonState.STOPPING.code());
        assertEquals(3, DaemonState.FAILED.code());
    }

    @Test
    void welcomeVersionOneHasNoUidField() {
        Welcome w = new Welcome(1, 5, "v", "memfd", "i", DaemonState.READY, 1234);
        byte[] wire = array(w.encode());
        assertEquals(8 + 2 + 4 + 3 + 7 + 3 + 1, wire.length, "no uid in version 1");
        assertEquals(-1, Welcome.decode(FrameReader.of(wire)).uid());
    }

    // ------------------------------------------------------------------------------------ IMPORT

    static Stream<Arguments> imports() {
        byte[] sha = new byte[32];
        for (int i = 0; i < 32; i++) {
            sha[i] = (byte) (i * 7);
        }
        byte[] structured = Wire.bytes(1000, 0x5A);
        List<Arguments> out = new ArrayList<>();
        for (int version : new int[] {1, 2}) {
            for (int device : new int[] {-1, 0, 1023}) {
                out.add(Arguments.of(version, device, Expectation.any(), new Wire().u8(0)));
                out.add(Arguments.of(version, device, new Expectation(Expectation.Kind.SHA256, sha),
                        new Wire().u8(1).raw(sha)));
                out.add(Arguments.of(version, device, Expectation.structured(structured),
                        new Wire().u8(2).blob32(structured)));
            }
        }
        out.add(Arguments.of(2, -1, Expectation.structured(new byte[0]), new Wire().u8(2).i32(0)));
        return out.stream();
    }

    @ParameterizedTest
    @MethodSource("imports")
    void importRoundTrip(int version, int device, Expectation e, Wire expectationBytes) {
        ImportRequest q = new ImportRequest(0, device, e);
        byte[] wire = Wire.frame(3, version).i32(0).i32(device).raw(expectationBytes.bytes()).bytes();
        assertArrayEquals(wire, array(q.encode(version)));
        FrameReader r = FrameReader.of(wire);
        assertEquals(MessageType.IMPORT, r.type());
        assertEquals(version, r.version());
        ImportRequest d = ImportRequest.decode(r);
        assertEquals(0, d.flags());
        assertEquals(device, d.device());
        assertEquals(e.kind(), d.expectation().kind());
        assertArrayEquals(e.bytes(), d.expectation().bytes());
    }

    @Test
    void sha256ExpectationFromHex() {
        String hex = "00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff";
        Expectation e = Expectation.sha256(hex);
        assertEquals(Expectation.Kind.SHA256, e.kind());
        assertEquals(hex.toLowerCase(java.util.Locale.ROOT), HexFormat.of().formatHex(e.bytes()));
    }

    // ------------------------------------------------------------------------------------ MANIFEST

    static Manifest manifest(int regionCount, int tableCount) {
        List<Manifest.Region> regions = new ArrayList<>();
        for (int i = 0; i < regionCount; i++) {
            RegionKind k = RegionKind.of(i % 4);
            regions.add(new Manifest.Region(k, (i + 1) * 4096L, k == RegionKind.VMM_DEVICE ? -1 : i % 3 - 1,
                    k == RegionKind.VMM_DEVICE ? i % 8 : -1));
        }
        List<Manifest.Table> tables = new ArrayList<>();
        for (int i = 0; i < tableCount; i++) {
            int region = regionCount == 0 ? -1 : i % regionCount;
            Manifest.Region r = region < 0 ? null : regions.get(region);
            long[] shape = i % 5 == 0 ? new long[0] : new long[] {i, 3};
            long bytes = region < 0 ? 0 : Math.min(r.size(), 16);
            tables.add(new Manifest.Table(String.format("t.%06d", i), i % 2 == 0 ? "F32" : "BF16", shape, bytes, region,
                    0, 0x1234_5678_9ABC_DEF0L ^ i, r == null ? RegionKind.MEMFD : r.kind(),
                    r == null ? -1 : r.numaNode(), r == null ? -1 : r.device()));
        }
        byte[] sha = Wire.bytes(32, 0xAB);
        return new Manifest(sha, Wire.bytes(100, 0x11), regions, tables);
    }

    static void assertManifestEquals(Manifest expected, Manifest actual) {
        assertArrayEquals(expected.fingerprintSha256(), actual.fingerprintSha256());
        assertArrayEquals(expected.fingerprint(), actual.fingerprint());
        assertEquals(expected.regions(), actual.regions());
        assertEquals(expected.tables(), actual.tables());
    }

    static Stream<Arguments> manifests() {
        return Stream.of(Arguments.of(0, 0), Arguments.of(0, 3), Arguments.of(1, 1), Arguments.of(4, 10),
                Arguments.of(300, 1000), Arguments.of(65536, 2));
    }

    @ParameterizedTest(name = "{0} regions, {1} tables")
    @MethodSource("manifests")
    void manifestRoundTrip(int regions, int tables) {
        Manifest m = manifest(regions, tables);
        for (int version : new int[] {1, 2}) {
            FrameReader r = FrameReader.of(m.encode(version));
            assertEquals(MessageType.MANIFEST, r.type());
            assertEquals(version, r.version());
            assertManifestEquals(m, Manifest.decode(r));
        }
    }

    @Test
    void manifestFieldByField() {
        Manifest.Region region = new Manifest.Region(RegionKind.MEMFD, 8192, 0, -1);
        Manifest.Table full = new Manifest.Table("a", "F32", new long[] {2, 3}, 24, 0, 4096, 99, RegionKind.MEMFD, 0, -1);
        Manifest.Table empty = new Manifest.Table("b", "BF16", new long[] {0, 16}, 0, -1, 0, 7, RegionKind.MEMFD, -1, -1);
        Manifest.Table scalar = new Manifest.Table("c", "U8", new long[0], 1, 0, 0, 5, RegionKind.MEMFD, 0, -1);
        byte[] sha = Wire.bytes(32, 1);
        byte[] fp = {9, 8, 7};
        Manifest m = new Manifest(sha, fp, List.of(region), List.of(full, empty, scalar));
        byte[] wire = Wire.frame(4, 2).raw(sha).blob32(fp).i32(1)
                .u8(0).i64(8192).i32(0).i32(-1)
                .i32(3)
                .str16("a").str16("F32").u8(2).i64(2).i64(3).i64(24).i32(0).i64(4096).i64(99).u8(0).i32(0).i32(-1)
                .str16("b").str16("BF16").u8(2).i64(0).i64(16).i64(0).i32(-1).i64(0).i64(7).u8(0).i32(-1).i32(-1)
                .str16("c").str16("U8").u8(0).i64(1).i32(0).i64(0).i64(5).u8(0).i32(0).i32(-1)
                .bytes();
        assertArrayEquals(wire, array(m.encode(2)));
        assertManifestEquals(m, Manifest.decode(FrameReader.of(wire)));
    }

    @Test
    void regionKindCodes() {
        assertEquals(0, RegionKind.MEMFD.code());
        assertEquals(1, RegionKind.MEMFD_HUGETLB.code());
        assertEquals(2, RegionKind.VMM_HOST.code());
        assertEquals(3, RegionKind.VMM_DEVICE.code());
    }

    @Test
    void tableAtTheVeryEndOfItsRegionFits() {
        Manifest.Region region = new Manifest.Region(RegionKind.MEMFD, 4096, -1, -1);
        Manifest.Table t = new Manifest.Table("end", "U8", new long[] {96}, 96, 0, 4000, 1, RegionKind.MEMFD, -1, -1);
        Manifest m = new Manifest(new byte[32], new byte[0], List.of(region), List.of(t));
        assertManifestEquals(m, Manifest.decode(FrameReader.of(m.encode(1))));
    }

    // ------------------------------------------------------------------------------------ empty frames

    @ParameterizedTest
    @EnumSource(value = MessageType.class, names = {"STATUS", "STOP", "STOP_ACK", "BYE"})
    void emptyFramesAreJustTheHeader(MessageType type) {
        for (int version : new int[] {1, 2}) {
            byte[] wire = array(Frames.empty(type, version));
            assertArrayEquals(Wire.frame(type, version).bytes(), wire);
            assertEquals(8, wire.length);
            FrameReader r = FrameReader.of(wire);
            assertEquals(type, r.type());
            assertEquals(version, r.version());
            r.end();
        }
    }

    // ------------------------------------------------------------------------------------ STATUS_REPLY

    @ParameterizedTest
    @ValueSource(strings = {"{}", "{\"state\":\"ready\",\"protocol\":[1,2]}", "{\"name\":\"名前 ✓\"}"})
    void statusReplyRoundTrip(String json) {
        for (int version : new int[] {1, 2}) {
            byte[] wire = Wire.frame(6, version).str32(json).bytes();
            assertArrayEquals(wire, array(Frames.statusReply(version, json)));
            FrameReader r = FrameReader.of(wire);
            assertEquals(MessageType.STATUS_REPLY, r.type());
            assertEquals(json, Frames.decodeStatusReply(r));
        }
    }

    /**
     * STATUS_REPLY's json may be up to 1 GiB (sent in parts in version 2), more than a v1 message's 64 MiB:
     * a length over 64 MiB is not refused as over a limit (the frame here is merely cut short).
     */
    @Test
    void statusReplyJsonMayExceedSixtyFourMebibytes() {
        byte[] wire = Wire.frame(6, 2).i32((64 << 20) + 1).raw(10, '7').bytes();
        ProtocolException e = org.junit.jupiter.api.Assertions.assertThrows(ProtocolException.class,
                () -> Frames.decodeStatusReply(FrameReader.of(wire)));
        org.junit.jupiter.api.Assertions.assertTrue(e.getMessage().contains("truncated"), e.getMessage());
        byte[] largest = Wire.frame(6, 2).i32((1 << 30) - 12).raw(10, '7').bytes();
        ProtocolException atLimit = org.junit.jupiter.api.Assertions.assertThrows(ProtocolException.class,
                () -> Frames.decodeStatusReply(FrameReader.of(largest)));
        org.junit.jupiter.api.Assertions.assertTrue(atLimit.getMessage().contains("truncated"),
                "a json filling a 1 GiB frame is within the limit: " + atLimit.getMessage());
    }

    // ------------------------------------------------------------------------------------ ERROR

    @ParameterizedTest
    @EnumSource(ErrorCode.class)
    void errorRoundTripForEveryCode(ErrorCode code) {
        List<String> details = List.of("table 'a': missing", "file 'b': size expected 1, actual 2", "ünï");
        byte[] fp = Wire.bytes(300, 0x42);
        ErrorReply e = new ErrorReply(code, "something about " + code, details, fp);
        int retryable = code == ErrorCode.NOT_READY || code == ErrorCode.BUSY ? 1 : 0;
        for (int version : new int[] {1, 2}) {
            Wire b = Wire.frame(9, version).u16(code.code()).u8(retryable).str32("something about " + code).i32(3);
            details.forEach(b::str32);
            byte[] wire = b.blob32(fp).bytes();
            assertArrayEquals(wire, array(e.encode(version)), "retryable is 1 for NOT_READY and BUSY only");
            ErrorReply d = ErrorReply.decode(FrameReader.of(wire));
            assertEquals(code, d.code());
            assertEquals(code.code(), d.wireCode());
            assertEquals(retryable == 1, d.retryable());
            assertEquals(e.message(), d.message());
            assertEquals(details, d.details());
            assertArrayEquals(fp, d.daemonFingerprint());
        }
    }

    @Test
    void errorCodesAreTheDocumentedOnes() {
        String[] names = {"BAD_REQUEST", "UNSUPPORTED_VERSION", "NOT_READY", "FINGERPRINT_MISMATCH", "NOT_ALLOWED",
            "STOPPING", "INTERNAL", "LOAD_FAILED", "BUSY", "TIMED_OUT"};
        for (int i = 0; i < names.length; i++) {
            assertEquals(i + 1, ErrorCode.valueOf(names[i]).code(), names[i]);
        }
    }

    @Test
    void errorWithAnUnknownCodeIsAcceptedAndShown() {
        byte[] wire = Wire.frame(9, 2).u16(77).u8(0).str32("from the future").i32(0).i32(0).bytes();
        ErrorReply d = ErrorReply.decode(FrameReader.of(wire));
        assertNull(d.code());
        assertEquals(77, d.wireCode());
        assertEquals("from the future", d.message());
        assertEquals("code 77", d.codeName());
    }

    @Test
    void errorWithNoDetailsAndNoFingerprint() {
        ErrorReply e = ErrorReply.of(ErrorCode.BUSY, "evicted");
        byte[] wire = Wire.frame(9, 1).u16(9).u8(1).str32("evicted").i32(0).i32(0).bytes();
        assertArrayEquals(wire, array(e.encode(1)));
        ErrorReply d = ErrorReply.decode(FrameReader.of(wire));
        assertEquals(List.of(), d.details());
        assertEquals(0, d.daemonFingerprint().length);
    }
}
