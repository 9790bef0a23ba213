package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Encodes one frame: the header, then little-endian fields, written with {@link ByteBuffer}s. The bytes go into
 * chunks (up to 1 MiB each, or one field's size) that are never copied as the frame grows, so that a frame of
 * {@code n} bytes costs about {@code 2n} of heap at its peak, when {@link #toArray} copies them into one array: a
 * daemon's 33 MB manifest must fit its bounded heap. At most {@link ProtocolDescriptor#MAX_FRAME} bytes.
 */
public final class FrameWriter {
    /** The largest chunk allocated ahead of need (a larger write gets a chunk of its own size). */
    private static final int CHUNK = 1 << 20;

    /** The chunks before {@link #current}, each filled up to its position. */
    private final List<ByteBuffer> chunks = new ArrayList<>();
    private ByteBuffer current = ByteBuffer.allocate(256).order(ByteOrder.LITTLE_ENDIAN);
    /** The bytes in {@link #chunks}. */
    private long before;

    public FrameWriter(MessageType type, int version) {
        room(ProtocolDescriptor.HEADER_BYTES).putInt(ProtocolDescriptor.MAGIC).putShort((short) version)
                .putShort((short) type.code());
    }

    private long length() {
        return before + current.position();
    }

    /**
     * Checks that {@code n} more bytes keep the frame within {@link ProtocolDescriptor#MAX_FRAME}.
     *
     * @throws ProtocolException when they do not
     */
    private void admit(long n) {
        long needed = length() + n;
        if (needed > ProtocolDescriptor.MAX_FRAME) {
            throw new ProtocolException("frame of " + needed + " bytes exceeds " + ProtocolDescriptor.MAX_FRAME);
        }
    }

    /** The current chunk, with room for a field of {@code n} bytes (in a new chunk when it has not). */
    private ByteBuffer room(int n) {
        admit(n);
        if (current.remaining() < n) {
            next(n);
        }
        return current;
    }

    /** Starts a chunk of at least {@code n} bytes: as large as the frame so far, up to {@link #CHUNK}. */
    private void next(int n) {
        chunks.add(current);
        before += current.position();
        current = ByteBuffer.allocate((int) Math.max(n, Math.min(CHUNK, before))).order(ByteOrder.LITTLE_ENDIAN);
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
        admit(v.length);
        int here = Math.min(current.remaining(), v.length);
        current.put(v, 0, here);
        if (here < v.length) {
            next(v.length - here);
            current.put(v, here, v.length - here);
        }
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
        byte[] out = new byte[(int) length()];
        int at = 0;
        for (ByteBuffer c : chunks) {
            System.arraycopy(c.array(), 0, out, at, c.position());
            at += c.position();
        }
        System.arraycopy(current.array(), 0, out, at, current.position());
        return out;
    }
}
