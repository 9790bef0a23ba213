package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Version 2's parts (docs/protocol.md, "Parts"): a frame whose body is over
 * {@link ProtocolDescriptor#MAX_PART_BODY} bytes goes as its first piece, type | CONTINUED, then
 * PART frames, CONTINUED on all but the last. {@link #split} plans the messages of a frame held as
 * slices (no copy of the body); {@link Joiner} puts a received frame back together.
 */
public final class Parts {
    private Parts() {
    }

    /** A piece of a byte array. */
    public record Slice(byte[] array, int offset, int length) {
        public static Slice of(byte[] a) {
            return new Slice(a, 0, a.length);
        }
    }

    /** The payload of one message: slices sent back to back. */
    public record Message(List<Slice> slices) {
        public int length() {
            int n = 0;
            for (Slice s : slices) {
                n += s.length();
            }
            return n;
        }

        /** The slices copied into one array, for a sender that writes a message at once. */
        public byte[] bytes() {
            byte[] out = new byte[length()];
            int at = 0;
            for (Slice s : slices) {
                System.arraycopy(s.array(), s.offset(), out, at, s.length());
                at += s.length();
            }
            return out;
        }
    }

    /**
     * The messages that carry {@code frame} (its first slice starts with the 8-byte frame header) in
     * {@code version}: one message for version 1 or a short frame, else parts.
     *
     * @throws ProtocolException when a version-1 frame exceeds {@link ProtocolDescriptor#MAX_PAYLOAD}
     */
    public static List<Message> split(List<Slice> frame, int version) {
        long total = 0;
        for (Slice s : frame) {
            total += s.length();
        }
        long body = total - ProtocolDescriptor.HEADER_BYTES;
        if (version < 2 || body <= ProtocolDescriptor.MAX_PART_BODY) {
            if (total > ProtocolDescriptor.MAX_PAYLOAD) {
                throw new ProtocolException("a frame of " + total + " bytes exceeds version 1's limit of "
                        + ProtocolDescriptor.MAX_PAYLOAD + "; a version-2 client receives it in parts");
            }
            return List.of(new Message(frame));
        }
        if (total > ProtocolDescriptor.MAX_FRAME) {
            throw new ProtocolException("a frame of " + total + " bytes exceeds " + ProtocolDescriptor.MAX_FRAME);
        }
        byte[] header = headerOf(frame);
        ByteBuffer h = ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN);
        int type = h.getShort(6) & 0xffff;
        List<Message> out = new ArrayList<>();
        BodyCursor cursor = new BodyCursor(frame);
        long left = body;
        boolean first = true;
        while (left > 0) {
            int n = (int) Math.min(left, ProtocolDescriptor.MAX_PART_BODY);
            left -= n;
            int pieceType = (first ? type : MessageType.PART.code()) | (left > 0 ? ProtocolDescriptor.CONTINUED : 0);
            byte[] ph = header.clone();
            ByteBuffer.wrap(ph).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) pieceType);
            List<Slice> slices = new ArrayList<>();
            slices.add(Slice.of(ph));
            cursor.take(n, slices);
            out.add(new Message(slices));
            first = false;
        }
        return out;
    }

    private static byte[] headerOf(List<Slice> frame) {
        byte[] header = new byte[ProtocolDescriptor.HEADER_BYTES];
        int got = 0;
        for (Slice s : frame) {
            int n = Math.min(s.length(), header.length - got);
            System.arraycopy(s.array(), s.offset(), header, got, n);
            got += n;
            if (got == header.length) {
                break;
            }
        }
        return header;
    }

    /** Walks a frame's slices past its header, handing out the body piece by piece. */
    private static final class BodyCursor {
        private final List<Slice> frame;
        private int index;
        private int offset;

        BodyCursor(List<Slice> frame) {
            this.frame = frame;
            skip(ProtocolDescriptor.HEADER_BYTES);
        }

        private void skip(int n) {
            while (n > 0) {
                Slice s = frame.get(index);
                int k = Math.min(n, s.length() - offset);
                n -= k;
                advance(k);
            }
        }

        private void advance(int k) {
            offset += k;
            if (offset == frame.get(index).length()) {
                index++;
                offset = 0;
            }
        }

        void take(int n, List<Slice> into) {
            while (n > 0) {
                Slice s = frame.get(index);
                int k = Math.min(n, s.length() - offset);
                into.add(new Slice(s.array(), s.offset() + offset, k));
                n -= k;
                advance(k);
            }
        }
    }

    /**
     * Reassembles one frame from received message payloads. Feed each payload; {@link #feed}
     * returns the whole frame (header with the continued bit cleared, then the body) once the last
     * piece is in, null while more are owed.
     */
    public static final class Joiner {
        private final long maxFrame;
        private byte[] header;
        private final List<byte[]> pieces = new ArrayList<>();
        private long total;

        public Joiner(long maxFrame) {
            this.maxFrame = maxFrame;
        }

        /** True when a continued frame is under way. */
        public boolean inProgress() {
            return header != null;
        }

        public byte[] feed(byte[] payload) {
            if (payload.length < ProtocolDescriptor.HEADER_BYTES) {
                throw new ProtocolException("frame of " + payload.length + " bytes is shorter than the 8-byte header");
            }
            ByteBuffer b = ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN);
            int version = b.getShort(4) & 0xffff;
            int rawType = b.getShort(6) & 0xffff;
            boolean continued = (rawType & ProtocolDescriptor.CONTINUED) != 0;
            int type = rawType & ~ProtocolDescriptor.CONTINUED;
            if (header == null) {
                if (type == MessageType.PART.code()) {
                    throw new ProtocolException("PART without a continued frame before it");
                }
                if (!continued) {
                    return payload;
                }
                if (version < 2) {
                    throw new ProtocolException("a continued frame in version " + version + " (parts are version 2)");
                }
                header = Arrays.copyOf(payload, ProtocolDescriptor.HEADER_BYTES);
                ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) type);
            } else {
                if (type != MessageType.PART.code()) {
                    throw new ProtocolException("expected PART " + (pieces.size() + 1) + " of a continued frame, got type "
                            + type);
                }
                int headerVersion = ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN).getShort(4) & 0xffff;
                if (version != headerVersion) {
                    throw new ProtocolException("PART encoded as version " + version + " in a frame of version "
                            + headerVersion);
                }
            }
            int bodyLength = payload.length - ProtocolDescriptor.HEADER_BYTES;
            if (bodyLength == 0 || bodyLength > ProtocolDescriptor.MAX_PART_BODY) {
                throw new ProtocolException("a piece of a continued frame holds " + bodyLength + " bytes; 1 to "
                        + ProtocolDescriptor.MAX_PART_BODY + " are allowed");
            }
            total += bodyLength;
            if (total + ProtocolDescriptor.HEADER_BYTES > maxFrame) {
                throw new ProtocolException("a continued frame grows past " + maxFrame + " bytes");
            }
            pieces.add(payload);
            if (continued) {
                return null;
            }
            byte[] out = new byte[(int) (total + ProtocolDescriptor.HEADER_BYTES)];
            System.arraycopy(header, 0, out, 0, header.length);
            int at = header.length;
            for (byte[] p : pieces) {
                System.arraycopy(p, ProtocolDescriptor.HEADER_BYTES, out, at, p.length - ProtocolDescriptor.HEADER_BYTES);
                at += p.length - ProtocolDescriptor.HEADER_BYTES;
            }
            header = null;
            pieces.clear();
            total = 0;
            return out;
        }
    }
}
