package io.engramhost.protocol;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Builds frames byte by byte as docs/protocol.md lays them out, independently of {@link FrameWriter}:
 * little-endian integers, str16 (u16 length + UTF-8), str32/blob32 (u32 length + bytes).
 */
final class Wire {
    /** "EGRM" in byte order, read as a little-endian u32 (docs/protocol.md, "Frames"). */
    static final int MAGIC = 0x4D524745;

    private final ByteArrayOutputStream out = new ByteArrayOutputStream();

    static Wire frame(int type, int version) {
        return new Wire().i32(MAGIC).u16(version).u16(type);
    }

    static Wire frame(MessageType type, int version) {
        return frame(type.code(), version);
    }

    Wire u8(int v) {
        out.write(v);
        return this;
    }

    Wire u16(int v) {
        return u8(v & 0xff).u8((v >>> 8) & 0xff);
    }

    Wire i32(int v) {
        return u16(v & 0xffff).u16(v >>> 16);
    }

    Wire i64(long v) {
        return i32((int) v).i32((int) (v >>> 32));
    }

    Wire raw(byte[] b) {
        out.writeBytes(b);
        return this;
    }

    Wire raw(int n, int value) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) value);
        return raw(b);
    }

    Wire str16(String s) {
        return str16(s.getBytes(StandardCharsets.UTF_8));
    }

    Wire str16(byte[] b) {
        return u16(b.length).raw(b);
    }

    Wire str32(String s) {
        return blob32(s.getBytes(StandardCharsets.UTF_8));
    }

    Wire blob32(byte[] b) {
        return i32(b.length).raw(b);
    }

    byte[] bytes() {
        return out.toByteArray();
    }

    int size() {
        return out.size();
    }

    FrameReader reader() {
        return FrameReader.of(bytes());
    }

    /** Bytes that are not valid UTF-8 (a lone continuation byte, then a truncated two-byte sequence). */
    static byte[] badUtf8() {
        return new byte[] {'o', 'k', (byte) 0x80, (byte) 0xC3};
    }

    static byte[] bytes(int n, int value) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) value);
        return b;
    }

    static String ascii(int n, char c) {
        return String.valueOf(c).repeat(n);
    }
}
