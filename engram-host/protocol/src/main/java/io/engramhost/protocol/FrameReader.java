package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import net.openhft.chronicle.bytes.Bytes;

/**
 * Decodes one frame with Chronicle Bytes. Every read is checked against what is left, and a short
 * frame fails naming the message and the field rather than reading past the end.
 */
public final class FrameReader {
    private final Bytes<byte[]> bytes;
    private final MessageType type;
    private final int version;

    private FrameReader(Bytes<byte[]> bytes, MessageType type, int version) {
        this.bytes = bytes;
        this.type = type;
        this.version = version;
    }

    /** Checks the header (magic, version, type) of {@code payload}. */
    public static FrameReader of(ByteBuffer payload) {
        if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) {
            throw new IllegalStateException("engram-host's protocol codec needs a little-endian machine");
        }
        byte[] b = new byte[payload.remaining()];
        payload.duplicate().get(b);
        Bytes<byte[]> bytes = Bytes.wrapForRead(b);
        if (b.length < ProtocolDescriptor.HEADER_BYTES) {
            throw new ProtocolException("frame of " + b.length + " bytes is shorter than the 8-byte header");
        }
        int magic = bytes.readInt();
        if (magic != ProtocolDescriptor.MAGIC) {
            throw new ProtocolException("bad magic 0x" + Integer.toHexString(magic) + ": not an engram-host frame");
        }
        int version = bytes.readUnsignedShort();
        MessageType type = MessageType.of(bytes.readUnsignedShort());
        return new FrameReader(bytes, type, version);
    }

    public MessageType type() {
        return type;
    }

    public int version() {
        return version;
    }

    private void need(long n, String field) {
        if (bytes.readRemaining() < n) {
            throw new ProtocolException(type + ": truncated at " + field + " (needs " + n + " bytes, "
                    + bytes.readRemaining() + " left)");
        }
    }

    public int u8(String field) {
        need(1, field);
        return bytes.readUnsignedByte();
    }

    public int u16(String field) {
        need(2, field);
        return bytes.readUnsignedShort();
    }

    public int i32(String field) {
        need(4, field);
        return bytes.readInt();
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
        return bytes.readLong();
    }

    public byte[] raw(int n, String field) {
        need(n, field);
        byte[] b = new byte[n];
        bytes.read(b);
        return b;
    }

    public String shortString(String field) {
        return utf8(raw(u16(field), field), field);
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
        if (bytes.readRemaining() != 0) {
            throw new ProtocolException(type + ": " + bytes.readRemaining() + " unexpected trailing bytes");
        }
    }
}
