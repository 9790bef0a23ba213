package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Malformed frames, at least one per field of every frame type (docs/protocol.md, "Frames": truncated
 * fields, over-long strings, invalid UTF-8, counts above their limits, bad enum values, trailing bytes,
 * a wrong version where versions are exact). Each must fail with a {@link ProtocolException} whose
 * message names the field.
 */
class MalformedFrameTest {

    /** One malformed frame, the decoder that must refuse it, and what the message must name. */
    record Case(String label, byte[] frame, Function<FrameReader, ?> decoder, String... names) {
        @Override
        public String toString() {
            return label;
        }
    }

    /** A frame written field by field, remembering where each field starts and ends. */
    static final class Fields {
        final String type;
        final Wire w;
        final Function<FrameReader, ?> decoder;
        final List<String> names = new ArrayList<>();
        final List<int[]> spans = new ArrayList<>();

        Fields(String type, Wire header, Function<FrameReader, ?> decoder) {
            this.type = type;
            this.w = header;
            this.decoder = decoder;
        }

        Fields f(String name, Consumer<Wire> write) {
            int start = w.size();
            write.accept(w);
            names.add(name);
            spans.add(new int[] {start, w.size()});
            return this;
        }

        byte[] full() {
            return w.bytes();
        }

        /** For every field: the frame cut where the field starts, and cut one byte before its end. */
        Stream<Case> truncations() {
            List<Case> out = new ArrayList<>();
            byte[] all = full();
            for (int i = 0; i < names.size(); i++) {
                int[] s = spans.get(i);
                out.add(new Case(type + " truncated at the start of " + names.get(i), Arrays.copyOf(all, s[0]), decoder,
                        "truncated", names.get(i)));
                if (s[1] - s[0] > 1) {
                    out.add(new Case(type + " truncated inside " + names.get(i), Arrays.copyOf(all, s[1] - 1), decoder,
                            "truncated", names.get(i)));
                }
            }
            out.add(new Case(type + " with a trailing byte", concat(all, new byte[] {0}), decoder, "trailing"));
            return out.stream();
        }
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    static Case c(String label, Wire w, Function<FrameReader, ?> decoder, String... names) {
        return new Case(label, w.bytes(), decoder, names);
    }

    // ------------------------------------------------------------------------------------ header

    static Stream<Case> headers() {
        Function<FrameReader, ?> end = r -> {
            r.end();
            return r;
        };
        return Stream.of(
                new Case("frame shorter than its header", Arrays.copyOf(Wire.frame(5, 1).bytes(), 7), end, "header"),
                new Case("empty frame", new byte[0], end, "header"),
                c("bad magic", new Wire().i32(0x4D524746).u16(1).u16(5), end, "magic"),
                c("magic in the wrong byte order", new Wire().i32(Integer.reverseBytes(Wire.MAGIC)).u16(1).u16(5), end,
                        "magic"),
                c("type 0", Wire.frame(0, 1), end, "type"),
                c("type 12", Wire.frame(12, 2), end, "type"),
                c("reserved type 22", Wire.frame(22, 2), end, "type"),
                c("reserved type 31", Wire.frame(31, 2), end, "type"),
                c("type 65535", Wire.frame(0xFFFF, 2), end, "type"));
    }

    // ------------------------------------------------------------------------------------ HELLO

    static Fields hello(String name) {
        return new Fields("HELLO", Wire.frame(1, 1), Hello::decode)
                .f("min_version", w -> w.u16(1))
                .f("max_version", w -> w.u16(2))
                .f("pid", w -> w.i32(123))
                .f("client", w -> w.str16(name));
    }

    static Stream<Case> hellos() {
        Function<FrameReader, ?> d = Hello::decode;
        return Stream.concat(Stream.concat(hello("engine").truncations(), hello("").truncations()), Stream.of(
                c("HELLO client over 4096 bytes", Wire.frame(1, 1).u16(1).u16(2).i32(1).str16(Wire.ascii(4097, 'x')), d,
                        "client", "4097"),
                c("HELLO client length 65535", Wire.frame(1, 1).u16(1).u16(2).i32(1).u16(65535).raw(10, 'x'), d,
                        "client"),
                c("HELLO client not UTF-8", Wire.frame(1, 1).u16(1).u16(2).i32(1).str16(Wire.badUtf8()), d, "client",
                        "UTF-8"),
                c("HELLO min_version 0", Wire.frame(1, 1).u16(0).u16(2).i32(1).str16("e"), d, "min_version"),
                c("HELLO min_version 0 and max_version 0", Wire.frame(1, 1).u16(0).u16(0).i32(1).str16("e"), d,
                        "min_version"),
                c("HELLO min_version above max_version", Wire.frame(1, 1).u16(3).u16(2).i32(1).str16("e"), d,
                        "min_version", "max_version"),
                c("HELLO encoded as version 2", Wire.frame(1, 2).u16(1).u16(2).i32(1).str16("e"), d, "version"),
                c("HELLO encoded as version 7", Wire.frame(1, 7).u16(1).u16(2).i32(1).str16("e"), d, "version"),
                c("HELLO encoded as version 0", Wire.frame(1, 0).u16(1).u16(2).i32(1).str16("e"), d, "version")));
    }

    // ------------------------------------------------------------------------------------ WELCOME

    static Fields welcome(int version) {
        Fields f = new Fields("WELCOME v" + version, Wire.frame(2, version), Welcome::decode)
                .f("version", w -> w.u16(version))
                .f("pid", w -> w.i32(99))
                .f("daemon_version", w -> w.str16("0.1.0"))
                .f("backend", w -> w.str16("memfd"))
                .f("instance", w -> w.str16("default"))
                .f("state", w -> w.u8(1));
        return version >= 2 ? f.f("uid", w -> w.i32(0)) : f;
    }

    /** A WELCOME whose string field {@code bad} (0, 1, 2) is {@code value}. */
    static Wire welcomeWith(int version, int bad, byte[] value) {
        Wire w = Wire.frame(2, version).u16(version).i32(99);
        byte[][] strings = {"0.1.0".getBytes(), "memfd".getBytes(), "default".getBytes()};
        strings[bad] = value;
        for (byte[] s : strings) {
            w.u16(s.length).raw(s);
        }
        w.u8(1);
        return version >= 2 ? w.i32(0) : w;
    }

    static Stream<Case> welcomes() {
        Function<FrameReader, ?> d = Welcome::decode;
        List<Case> out = new ArrayList<>();
        String[] names = {"daemon_version", "backend", "instance"};
        for (int v : new int[] {1, 2}) {
            for (int i = 0; i < 3; i++) {
                out.add(c("WELCOME v" + v + " " + names[i] + " over 4096 bytes",
                        welcomeWith(v, i, Wire.bytes(4097, 'a')), d, names[i], "4097"));
                out.add(c("WELCOME v" + v + " " + names[i] + " not UTF-8", welcomeWith(v, i, Wire.badUtf8()), d,
                        names[i], "UTF-8"));
            }
            out.add(c("WELCOME v" + v + " state 4", Wire.frame(2, v).u16(v).i32(1).str16("a").str16("b").str16("c").u8(4)
                    .raw(v >= 2 ? 4 : 0, 0), d, "state"));
            out.add(c("WELCOME v" + v + " state 255", Wire.frame(2, v).u16(v).i32(1).str16("a").str16("b").str16("c")
                    .u8(255).raw(v >= 2 ? 4 : 0, 0), d, "state"));
        }
        out.add(c("WELCOME choosing version 2 in a version-1 frame",
                Wire.frame(2, 1).u16(2).i32(1).str16("a").str16("b").str16("c").u8(1).i32(0), d, "version"));
        out.add(c("WELCOME choosing version 1 in a version-2 frame",
                Wire.frame(2, 2).u16(1).i32(1).str16("a").str16("b").str16("c").u8(1), d, "version"));
        out.add(c("WELCOME v1 carrying a uid", Wire.frame(2, 1).u16(1).i32(1).str16("a").str16("b").str16("c").u8(1)
                .i32(0), d, "trailing"));
        return Stream.of(welcome(1).truncations(), welcome(2).truncations(), out.stream()).flatMap(s -> s);
    }

    // ------------------------------------------------------------------------------------ IMPORT

    static Fields importOf(int version, int kind) {
        Fields f = new Fields("IMPORT v" + version + " kind " + kind, Wire.frame(3, version), ImportRequest::decode)
                .f("flags", w -> w.i32(0))
                .f("device", w -> w.i32(-1))
                .f("expectation", w -> w.u8(kind));
        return switch (kind) {
            case 1 -> f.f("sha256", w -> w.raw(32, 0xEE));
            case 2 -> f.f("fingerprint", w -> w.blob32(Wire.bytes(40, 0x33)));
            default -> f;
        };
    }

    static Stream<Case> imports() {
        Function<FrameReader, ?> d = ImportRequest::decode;
        List<Case> out = new ArrayList<>();
        for (int v : new int[] {1, 2}) {
            out.add(c("IMPORT v" + v + " flags 1", Wire.frame(3, v).i32(1).i32(-1).u8(0), d, "flags"));
            out.add(c("IMPORT v" + v + " flags -1", Wire.frame(3, v).i32(-1).i32(-1).u8(0), d, "flags"));
            out.add(c("IMPORT v" + v + " device -2", Wire.frame(3, v).i32(0).i32(-2).u8(0), d, "device"));
            out.add(c("IMPORT v" + v + " device 1024", Wire.frame(3, v).i32(0).i32(1024).u8(0), d, "device"));
            out.add(c("IMPORT v" + v + " device MIN_VALUE", Wire.frame(3, v).i32(0).i32(Integer.MIN_VALUE).u8(0), d,
                    "device"));
            out.add(c("IMPORT v" + v + " expectation kind 3", Wire.frame(3, v).i32(0).i32(-1).u8(3), d, "expectation"));
            out.add(c("IMPORT v" + v + " expectation kind 255", Wire.frame(3, v).i32(0).i32(-1).u8(255), d,
                    "expectation"));
            out.add(c("IMPORT v" + v + " structured expectation over 16 MiB",
                    Wire.frame(3, v).i32(0).i32(-1).u8(2).i32((16 << 20) + 1), d, "fingerprint", "16777217"));
            out.add(c("IMPORT v" + v + " structured expectation length 0xFFFFFFFF",
                    Wire.frame(3, v).i32(0).i32(-1).u8(2).i32(-1).raw(8, 0), d, "fingerprint"));
        }
        return Stream.of(importOf(1, 0).truncations(), importOf(2, 0).truncations(), importOf(2, 1).truncations(),
                importOf(1, 2).truncations(), importOf(2, 2).truncations(), out.stream()).flatMap(s -> s);
    }

    // ------------------------------------------------------------------------------------ MANIFEST

    /** A manifest with one memfd region of 8192 bytes and one table in it; parts replaceable by index. */
    static Fields manifestFields() {
        return new Fields("MANIFEST", Wire.frame(4, 2), Manifest::decode)
                .f("fingerprint_sha256", w -> w.raw(32, 0xAA))
                .f("fingerprint", w -> w.blob32(new byte[] {1, 2, 3}))
                .f("region_count", w -> w.i32(1))
                .f("region kind", w -> w.u8(0))
                .f("region size", w -> w.i64(8192))
                .f("region numa_node", w -> w.i32(0))
                .f("region device", w -> w.i32(-1))
                .f("table_count", w -> w.i32(1))
                .f("table name", w -> w.str16("engram.w"))
                .f("table dtype", w -> w.str16("F32"))
                .f("table rank", w -> w.u8(2))
                .f("table shape", w -> w.i64(4).i64(4))
                .f("table bytes", w -> w.i64(64))
                .f("table region", w -> w.i32(0))
                .f("table offset", w -> w.i64(4096))
                .f("table digest", w -> w.i64(0x0123456789L))
                .f("table kind", w -> w.u8(0))
                .f("table numa_node", w -> w.i32(0))
                .f("table device", w -> w.i32(-1));
    }

    static Wire manifestHead(int regionKind, long regionSize) {
        return Wire.frame(4, 2).raw(32, 0xAA).blob32(new byte[] {1}).i32(1).u8(regionKind).i64(regionSize).i32(0).i32(-1);
    }

    /** A manifest of one 8192-byte region and one table whose region, offset, bytes and kind are given. */
    static Wire manifestTable(String name, String dtype, int rank, long bytes, int region, long offset, int kind) {
        Wire w = manifestHead(0, 8192).i32(1).str16(name).str16(dtype).u8(rank);
        for (int i = 0; i < rank; i++) {
            w.i64(1);
        }
        return w.i64(bytes).i32(region).i64(offset).i64(7).u8(kind).i32(0).i32(-1);
    }

    static Wire manifestTableNamed(byte[] name, byte[] dtype) {
        return manifestHead(0, 8192).i32(1).str16(name).str16(dtype).u8(0).i64(4).i32(0).i64(0).i64(7).u8(0).i32(0)
                .i32(-1);
    }

    static Stream<Case> manifests() {
        Function<FrameReader, ?> d = Manifest::decode;
        byte[] longName = Wire.bytes(4097, 'n');
        return Stream.concat(manifestFields().truncations(), Stream.of(
                c("MANIFEST fingerprint over 16 MiB", Wire.frame(4, 2).raw(32, 0).i32((16 << 20) + 1), d, "fingerprint"),
                c("MANIFEST region_count 65537", Wire.frame(4, 2).raw(32, 0).i32(0).i32(65537), d, "region_count"),
                c("MANIFEST region_count 0xFFFFFFFF", Wire.frame(4, 2).raw(32, 0).i32(0).i32(-1), d, "region_count"),
                c("MANIFEST region kind 4", manifestHead(4, 8192).i32(0), d, "kind"),
                c("MANIFEST region kind 255 (never on the wire)", manifestHead(255, 8192).i32(0), d, "kind"),
                c("MANIFEST region size 0", manifestHead(0, 0).i32(0), d, "size"),
                c("MANIFEST region size negative", manifestHead(0, -4096).i32(0), d, "size"),
                c("MANIFEST table_count 1048577", manifestHead(0, 8192).i32(1048577), d, "table_count"),
                c("MANIFEST table name over 4096 bytes", manifestTableNamed(longName, "U8".getBytes()), d, "name",
                        "4097"),
                c("MANIFEST table name not UTF-8", manifestTableNamed(Wire.badUtf8(), "U8".getBytes()), d, "name",
                        "UTF-8"),
                c("MANIFEST table dtype over 4096 bytes", manifestTableNamed("t".getBytes(), longName), d, "dtype",
                        "4097"),
                c("MANIFEST table dtype not UTF-8", manifestTableNamed("t".getBytes(), Wire.badUtf8()), d, "dtype",
                        "UTF-8"),
                c("MANIFEST table rank 17", manifestTable("t", "U8", 17, 1, 0, 0, 0), d, "rank"),
                c("MANIFEST table rank 255", manifestHead(0, 8192).i32(1).str16("t").str16("U8").u8(255), d, "rank"),
                c("MANIFEST table bytes negative", manifestTable("t", "U8", 1, -1, 0, 0, 0), d, "bytes"),
                c("MANIFEST table region 1 of 1", manifestTable("t", "U8", 1, 1, 1, 0, 0), d, "region"),
                c("MANIFEST table region -2", manifestTable("t", "U8", 1, 1, -2, 0, 0), d, "region"),
                c("MANIFEST table with bytes but region -1", manifestTable("t", "U8", 1, 1, -1, 0, 0), d, "region"),
                c("MANIFEST table offset negative", manifestTable("t", "U8", 1, 1, 0, -1, 0), d, "offset"),
                c("MANIFEST table past its region's end", manifestTable("t", "U8", 1, 100, 0, 8100, 0), d, "region"),
                c("MANIFEST table offset past its region", manifestTable("t", "U8", 1, 0, 0, 8193, 0), d, "region"),
                c("MANIFEST table offset + bytes overflowing", manifestTable("t", "U8", 1, Long.MAX_VALUE, 0, 8, 0), d,
                        "region"),
                c("MANIFEST table kind 4", manifestTable("t", "U8", 1, 1, 0, 0, 4), d, "kind"),
                c("MANIFEST table kind 255 (never on the wire)", manifestTable("t", "U8", 1, 1, 0, 0, 255), d, "kind")));
    }

    // ------------------------------------------------------------------------------------ STATUS_REPLY and empty frames

    static Stream<Case> statusReplies() {
        Function<FrameReader, ?> d = Frames::decodeStatusReply;
        Function<FrameReader, ?> end = r -> {
            r.end();
            return r;
        };
        List<Case> out = new ArrayList<>();
        for (MessageType t : List.of(MessageType.STATUS, MessageType.STOP, MessageType.STOP_ACK, MessageType.BYE)) {
            out.add(c(t + " with a body", Wire.frame(t, 2).u8(0), end, "trailing"));
            out.add(c(t + " with an 8-byte body", Wire.frame(t, 1).i64(0), end, "trailing"));
        }
        out.add(c("STATUS_REPLY json not UTF-8", Wire.frame(6, 2).blob32(Wire.badUtf8()), d, "json", "UTF-8"));
        out.add(c("STATUS_REPLY json longer than 1 GiB", Wire.frame(6, 2).i32((1 << 30) + 1), d, "json"));
        out.add(c("STATUS_REPLY json length 0xFFFFFFFF", Wire.frame(6, 2).i32(-1), d, "json"));
        return Stream.concat(new Fields("STATUS_REPLY", Wire.frame(6, 2), d).f("json", w -> w.str32("{\"a\":1}"))
                .truncations(), out.stream());
    }

    // ------------------------------------------------------------------------------------ ERROR

    static Fields errorFields() {
        return new Fields("ERROR", Wire.frame(9, 2), ErrorReply::decode)
                .f("code", w -> w.u16(4))
                .f("retryable", w -> w.u8(0))
                .f("message", w -> w.str32("fingerprint mismatch"))
                .f("detail_count", w -> w.i32(2))
                .f("detail", w -> w.str32("table 'a': missing"))
                .f("detail", w -> w.str32("table 'b': not expected"))
                .f("daemon_fingerprint", w -> w.blob32(Wire.bytes(20, 0x44)));
    }

    static Wire errorWith(byte[] message, int count, byte[][] details, int fingerprintLength) {
        Wire w = Wire.frame(9, 1).u16(1).u8(0).blob32(message).i32(count);
        for (byte[] d : details) {
            w.blob32(d);
        }
        return fingerprintLength < 0 ? w : w.i32(fingerprintLength);
    }

    static Stream<Case> errors() {
        Function<FrameReader, ?> d = ErrorReply::decode;
        byte[] ok = "ok".getBytes();
        byte[] longLine = Wire.bytes(4097, 'l');
        return Stream.concat(errorFields().truncations(), Stream.of(
                c("ERROR message over 4096 bytes", errorWith(longLine, 0, new byte[0][], 0), d, "message", "4097"),
                c("ERROR message not UTF-8", errorWith(Wire.badUtf8(), 0, new byte[0][], 0), d, "message", "UTF-8"),
                c("ERROR detail_count 102", errorWith(ok, 102, new byte[0][], -1), d, "detail_count", "102"),
                c("ERROR detail_count 0xFFFFFFFF", errorWith(ok, -1, new byte[0][], -1), d, "detail_count"),
                c("ERROR detail over 4096 bytes", errorWith(ok, 2, new byte[][] {ok, longLine}, 0), d, "detail", "4097"),
                c("ERROR detail not UTF-8", errorWith(ok, 1, new byte[][] {Wire.badUtf8()}, 0), d, "detail", "UTF-8"),
                c("ERROR daemon_fingerprint over 16 MiB", errorWith(ok, 0, new byte[0][], (16 << 20) + 1), d,
                        "daemon_fingerprint"),
                c("ERROR daemon_fingerprint length 0xFFFFFFFF", errorWith(ok, 0, new byte[0][], -1).i32(-1).raw(8, 0),
                        d, "daemon_fingerprint")));
    }

    static Stream<Arguments> cases() {
        return Stream.of(headers(), hellos(), welcomes(), imports(), manifests(), statusReplies(), errors())
                .flatMap(s -> s).map(Arguments::of);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void isRefusedNamingTheField(Case k) {
        ProtocolException e = assertThrows(ProtocolException.class, () -> k.decoder().apply(FrameReader.of(k.frame())),
                k.label());
        for (String name : k.names()) {
            assertTrue(e.getMessage().contains(name), k.label() + ": the message names '" + name + "': " + e.getMessage());
        }
    }
}
