package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Encodes one frame: the header, then little-endian fields, written into a {@link ByteBuffer} that grows as
 * needed, up to {@link ProtocolDescriptor#MAX_FRAME} bytes.
 */
public final class FrameWriter {
    private ByteBuffer bytes = ByteBuffer.allocate(256).order(ByteOrder.LITTLE_ENDIAN);

    public FrameWriter(MessageType type, int version) {
        room(ProtocolDescriptor.HEADER_BYTES).putInt(ProtocolDescriptor.MAGIC).putShort((short) version)
                .putShort((short) type.code());
    }

    /**
     * The buffer, with room for {@code n} more bytes.
     *
     * @throws ProtocolException when the frame would exceed {@link ProtocolDescriptor#MAX_FRAME}
     */
    private ByteBuffer room(int n) {
        if (bytes.remaining() < n) {
            long needed = (long) bytes.position() + n;
            if (needed > ProtocolDescriptor.MAX_FRAME) {
                throw new ProtocolException("frame of " + needed + " bytes exceeds " + ProtocolDescriptor.MAX_FRAME);
            }
            ByteBuffer bigger = ByteBuffer.allocate((int) Math.min(ProtocolDescriptor.MAX_FRAME,
                    Math.max(needed, 2L * bytes.capacity()))).order(ByteOrder.LITTLE_ENDIAN);
            bigger.put(bytes.flip());
            bytes = bigger;
        }
        return bytes;
    }

    public FrameWriter u8(int v) {
        room(1).put((byte) v);
        return this;
    }

    public FrameWriter u16(int v) {
        room(2).putShort((short) v);
        return this;
    }

    public FrameWriter i32(int v) {
        room(4).putInt(v);
        return this;
    }

    public FrameWriter i64(long v) {
        room(8).putLong(v);
        return this;
    }

    public FrameWriter raw(byte[] v) {
        room(v.length).put(v);
        return this;
    }

    /** u16 length, then UTF-8. */
    public FrameWriter shortString(String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length > ProtocolDescriptor.MAX_SHORT_STRING) {
            throw new ProtocolException("string of " + b.length + " bytes exceeds " + ProtocolDescriptor.MAX_SHORT_STRING
                    + ": " + s.substring(0, 40) + "...");
        }
        return u16(b.length).raw(b);
    }

    /** u32 length, then the bytes. */
    public FrameWriter blob(byte[] b) {
        return i32(b.length).raw(b);
    }

    public FrameWriter longString(String s) {
        return blob(s.getBytes(StandardCharsets.UTF_8));
    }

    public ByteBuffer toBuffer() {
        return ByteBuffer.wrap(toArray());
    }

    /**
     * The frame's bytes. At most {@link ProtocolDescriptor#MAX_FRAME} (a write past that throws); whether it fits one
     * message (version 1) or goes in parts (version 2) is the sender's business ({@link Parts}).
     */
    public byte[] toArray() {
        return Arrays.copyOf(bytes.array(), bytes.position());
    }
}
