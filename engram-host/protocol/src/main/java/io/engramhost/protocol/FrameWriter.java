package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import net.openhft.chronicle.bytes.Bytes;

/** Encodes one frame with Chronicle Bytes: header, then little-endian fields. */
public final class FrameWriter {
    private final Bytes<?> bytes = Bytes.allocateElasticOnHeap(256);

    public FrameWriter(MessageType type, int version) {
        bytes.writeInt(ProtocolDescriptor.MAGIC);
        bytes.writeUnsignedShort(version);
        bytes.writeUnsignedShort(type.code());
    }

    public FrameWriter u8(int v) {
        bytes.writeUnsignedByte(v);
        return this;
    }

    public FrameWriter u16(int v) {
        bytes.writeUnsignedShort(v);
        return this;
    }

    public FrameWriter i32(int v) {
        bytes.writeInt(v);
        return this;
    }

    public FrameWriter i64(long v) {
        bytes.writeLong(v);
        return this;
    }

    public FrameWriter raw(byte[] v) {
        bytes.write(v);
        return this;
    }

    /** u16 length, then UTF-8. */
    public FrameWriter shortString(String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length > ProtocolDescriptor.MAX_SHORT_STRING) {
            throw new ProtocolException("string of " + b.length + " bytes exceeds " + ProtocolDescriptor.MAX_SHORT_STRING
                    + ": " + s.substring(0, 40) + "...");
        }
        bytes.writeUnsignedShort(b.length);
        bytes.write(b);
        return this;
    }

    /** u32 length, then the bytes. */
    public FrameWriter blob(byte[] b) {
        bytes.writeInt(b.length);
        bytes.write(b);
        return this;
    }

    public FrameWriter longString(String s) {
        return blob(s.getBytes(StandardCharsets.UTF_8));
    }

    public ByteBuffer toBuffer() {
        return ByteBuffer.wrap(toArray());
    }

    /**
     * The frame's bytes. At most {@link ProtocolDescriptor#MAX_FRAME}; whether it fits one message
     * (version 1) or goes in parts (version 2) is the sender's business ({@link Parts}).
     */
    public byte[] toArray() {
        long n = bytes.readRemaining();
        if (n > ProtocolDescriptor.MAX_FRAME) {
            throw new ProtocolException("frame of " + n + " bytes exceeds " + ProtocolDescriptor.MAX_FRAME);
        }
        byte[] out = new byte[(int) n];
        bytes.read(out);
        return out;
    }
}
