package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Decodes one frame: the header, then little-endian fields, read with a {@link ByteBuffer}. Every read is checked
 * against what is left, and a short frame fails naming the message and the field rather than reading past the end.
 */
public final class FrameReader {
    private final ByteBuffer bytes;
    private final MessageType type;
    private final int version;

    private FrameReader(ByteBuffer bytes, MessageType type, int version) {
        this.bytes = bytes;
        this.type = type;
        this.version = version;
    }

    /** Checks the header (magic, version, type) of {@code payload}. */
    public static FrameReader of(ByteBuffer payload) {
        byte[] b = new byte[payload.remaining()];
        payload.duplicate().get(b);
        return of(b);
    }

    /** Checks the header of the frame in {@code b}, which the reader then reads in place (no copy). */
    public static FrameReader of(byte[] b) {
        if (b.length < ProtocolDescriptor.HEADER_BYTES) {
            throw new ProtocolException("frame of " + b.length + " bytes is shorter than the 8-byte header");
        }
        ByteBuffer bytes = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        int magic = bytes.getInt();
        if (magic != ProtocolDescriptor.MAGIC) {
            throw new ProtocolException("bad magic 0x" + Integer.toHexString(magic) + ": not an engram-host frame");
        }
        int version = Short.toUnsignedInt(bytes.getShort());
        MessageType type = MessageType.of(Short.toUnsignedInt(bytes.getShort()));
        return new FrameReader(bytes, type, version);
    }

    public MessageType type() {
        return type;
    }

    public int version() {
        return version;
    }

    private void need(long n, String field) {
        if (bytes.remaining() < n) {
            throw new ProtocolException(type + ": truncated at " + field + " (needs " + n + " bytes, "
                    + bytes.remaining() + " left)");
        }
    }

    public int u8(String field) {
        need(1, field);
        return Byte.toUnsignedInt(bytes.get());
    }

    public int u16(String field) {
        need(2, field);
        return Short.toUnsignedInt(bytes.getShort());
    }

    public int i32(String field) {
        need(4, field);
        return bytes.getInt();
    }

    /** A u32 count, checked against {@code max}. */
    public int count(String field, int max) {
        long n = Integer.toUnsignedLong(i32(field));
        if (n > max) {
            throw new ProtocolException(type + ": " + field + " " + n + " exceeds the limit " + max);
        }
        return (int) n;
    }

    public long i64(String field) {
        need(8, field);
        return bytes.getLong();
    }

    public byte[] raw(int n, String field) {
        need(n, field);
        byte[] b = new byte[n];
        bytes.get(b);
        return b;
    }

    /** A str16: at most {@link ProtocolDescriptor#MAX_SHORT_STRING} bytes of UTF-8. */
    public String shortString(String field) {
        int n = u16(field + " length");
        if (n > ProtocolDescriptor.MAX_SHORT_STRING) {
            throw new ProtocolException(type + ": " + field + " of " + n + " bytes exceeds the limit "
                    + ProtocolDescriptor.MAX_SHORT_STRING);
        }
        return utf8(raw(n, field), field);
    }

    /** A str32 of at most {@code max} bytes. */
    public String longString(String field, int max) {
        return utf8(blob(field, max), field);
    }

    /** Fails unless the frame is encoded in {@code version} (docs/protocol.md: version checks are exact). */
    public FrameReader requireVersion(int expected) {
        if (version != expected) {
            throw new ProtocolException(type + " encoded as version " + version + ", but version " + expected
                    + (type == MessageType.HELLO ? " is required for HELLO" : " was chosen"));
        }
        return this;
    }

    public byte[] blob(String field, int max) {
        return raw(count(field + " length", max), field);
    }

    public String longString(String field) {
        return utf8(blob(field, ProtocolDescriptor.MAX_PAYLOAD), field);
    }

    private String utf8(byte[] b, String field) {
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(b)).toString();
        } catch (CharacterCodingException e) {
            throw new ProtocolException(type + ": " + field + " is not valid UTF-8");
        }
    }

    /** Fails when bytes are left over: a frame must be consumed exactly. */
    public void end() {
        if (bytes.remaining() != 0) {
            throw new ProtocolException(type + ": " + bytes.remaining() + " unexpected trailing bytes");
        }
    }
}
