package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Version 2's parts (docs/protocol.md, "Parts"): a frame whose body is over 1,048,576 bytes goes as a
 * first message with type | 0x8000 and the first 1 MiB of the body, then PART frames (11 | 0x8000
 * while more follow, 11 on the last), each carrying 1 to 1,048,576 body bytes.
 */
class PartsTest {
    private static final int MIB = 1 << 20;

    /** A frame of the given type and version whose body is {@code body} pseudo-random bytes. */
    static byte[] frame(int type, int version, int body) {
        byte[] b = new byte[8 + body];
        new Random(body).nextBytes(b);
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putInt(0, Wire.MAGIC).putShort(4, (short) version)
                .putShort(6, (short) type);
        return b;
    }

    static byte[] payload(Parts.Message m) {
        byte[] out = new byte[m.length()];
        int at = 0;
        for (Parts.Slice s : m.slices()) {
            System.arraycopy(s.array(), s.offset(), out, at, s.length());
            at += s.length();
        }
        return out;
    }

    static int typeOf(byte[] payload) {
        return ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN).getShort(6) & 0xffff;
    }

    static int versionOf(byte[] payload) {
        return ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN).getShort(4) & 0xffff;
    }

    static byte[] withType(byte[] frame, int type) {
        byte[] b = frame.clone();
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) type);
        return b;
    }

    static List<byte[]> split(byte[] frame, int version) {
        List<byte[]> out = new ArrayList<>();
        for (Parts.Message m : Parts.split(List.of(Parts.Slice.of(frame)), version)) {
            out.add(payload(m));
        }
        return out;
    }

    /** The messages a v2 frame of this body length must become: [type, body length] per message. */
    static Stream<Arguments> sizes() {
        return Stream.of(
                Arguments.of(0, 1),
                Arguments.of(1, 1),
                Arguments.of(MIB - 1, 1),
                Arguments.of(MIB, 1),
                Arguments.of(MIB + 1, 2),
                Arguments.of(2 * MIB, 2),
                Arguments.of(2 * MIB + 1, 3),
                Arguments.of(3 * MIB + 5, 4));
    }

    @ParameterizedTest(name = "body of {0} bytes -> {1} message(s)")
    @MethodSource("sizes")
    void splitsAtTheOneMebibyteBoundary(int body, int messages) {
        byte[] frame = frame(MessageType.MANIFEST.code(), 2, body);
        List<byte[]> parts = split(frame, 2);
        assertEquals(messages, parts.size());
        if (messages == 1) {
            assertArrayEquals(frame, parts.get(0), "a frame of at most 1 MiB of body goes whole, no continued bit");
            assertTrue(parts.get(0).length <= 1_048_584);
            return;
        }
        byte[] joined = new byte[8 + body];
        System.arraycopy(frame, 0, joined, 0, 8);
        int at = 8;
        for (int i = 0; i < parts.size(); i++) {
            byte[] p = parts.get(i);
            boolean last = i == parts.size() - 1;
            assertEquals(Wire.MAGIC, ByteBuffer.wrap(p).order(ByteOrder.LITTLE_ENDIAN).getInt(0), "magic of message " + i);
            assertEquals(2, versionOf(p), "every piece carries the frame's version");
            int expectedType = (i == 0 ? MessageType.MANIFEST.code() : MessageType.PART.code()) | (last ? 0 : 0x8000);
            assertEquals(expectedType, typeOf(p), "type of message " + i);
            int pieceBody = p.length - 8;
            assertTrue(pieceBody >= 1 && pieceBody <= MIB, "piece body " + pieceBody);
            if (!last) {
                assertEquals(MIB, pieceBody, "all pieces but the last are full");
                assertEquals(1_048_584, p.length, "a daemon message in version 2 is at most 1,048,584 bytes");
            }
            System.arraycopy(p, 8, joined, at, pieceBody);
            at += pieceBody;
        }
        assertEquals(8 + body, at);
        assertArrayEquals(frame, joined, "the pieces concatenate to the body");
    }

    @ParameterizedTest(name = "body of {0} bytes")
    @MethodSource("sizes")
    void joinerPutsTheFrameBackTogether(int body, int messages) {
        byte[] frame = frame(MessageType.STATUS_REPLY.code(), 2, body);
        Parts.Joiner j = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
        List<byte[]> parts = split(frame, 2);
        byte[] out = null;
        for (int i = 0; i < parts.size(); i++) {
            out = j.feed(parts.get(i));
            if (i < parts.size() - 1) {
                assertNull(out, "more parts are owed after message " + i);
                assertTrue(j.inProgress());
            }
        }
        assertFalse(j.inProgress());
        assertArrayEquals(frame, out, "header with the continued bit cleared, then the whole body");
        // The joiner is ready for the next frame.
        byte[] small = frame(MessageType.ERROR.code(), 2, 10);
        assertArrayEquals(small, j.feed(small));
    }

    @Test
    void versionOneIsNeverSplit() {
        byte[] frame = frame(MessageType.MANIFEST.code(), 1, 3 * MIB);
        List<byte[]> parts = split(frame, 1);
        assertEquals(1, parts.size());
        assertArrayEquals(frame, parts.get(0));
    }

    @Test
    void splitHandlesAFrameHeldAsManySlices() {
        byte[] frame = frame(MessageType.MANIFEST.code(), 2, 2 * MIB + 333);
        List<Parts.Slice> slices = new ArrayList<>();
        int[] cuts = {0, 3, 8, 9, 100_000, MIB + 7, MIB + 8, MIB + 9, 2 * MIB + 100, frame.length};
        for (int i = 0; i + 1 < cuts.length; i++) {
            slices.add(new Parts.Slice(frame, cuts[i], cuts[i + 1] - cuts[i]));
        }
        Parts.Joiner j = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
        byte[] out = null;
        List<Parts.Message> messages = Parts.split(slices, 2);
        assertEquals(3, messages.size());
        for (Parts.Message m : messages) {
            out = j.feed(payload(m));
        }
        assertArrayEquals(frame, out);
    }

    /** A v1 message is at most 64 MiB: the split refuses more, naming the size (slices share one array). */
    @Test
    void versionOneFrameOverSixtyFourMebibytesIsRefused() {
        byte[] chunk = new byte[MIB];
        byte[] header = Arrays.copyOf(frame(MessageType.MANIFEST.code(), 1, 0), 8);
        List<Parts.Slice> exactly = new ArrayList<>();
        exactly.add(Parts.Slice.of(header));
        for (int i = 0; i < 63; i++) {
            exactly.add(Parts.Slice.of(chunk));
        }
        exactly.add(new Parts.Slice(chunk, 0, MIB - 8));
        List<Parts.Message> one = Parts.split(exactly, 1);
        assertEquals(1, one.size());
        assertEquals(67_108_864, one.get(0).length(), "a frame of exactly 64 MiB fits version 1");

        List<Parts.Slice> over = new ArrayList<>(exactly);
        over.add(new Parts.Slice(chunk, 0, 1));
        ProtocolException e = assertThrows(ProtocolException.class, () -> Parts.split(over, 1));
        assertTrue(e.getMessage().contains("67108865"), "names the size: " + e.getMessage());
        assertTrue(e.getMessage().contains("version 1") || e.getMessage().contains("67108864"), e.getMessage());
        // The same frame goes to a version-2 peer in parts: its body of 67,108,857 bytes in 64 messages.
        List<Parts.Slice> v2 = new ArrayList<>(over);
        v2.set(0, Parts.Slice.of(withVersion(header, 2)));
        assertEquals(64, Parts.split(v2, 2).size());
    }

    static byte[] withVersion(byte[] frame, int version) {
        byte[] b = frame.clone();
        ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putShort(4, (short) version);
        return b;
    }

    /** No logical frame over 1 GiB (1,073,741,824 bytes) is ever sent. */
    @Test
    void versionTwoFrameOverOneGibibyteIsRefused() {
        byte[] chunk = new byte[MIB];
        List<Parts.Slice> slices = new ArrayList<>();
        slices.add(Parts.Slice.of(Arrays.copyOf(frame(MessageType.STATUS_REPLY.code(), 2, 0), 8)));
        for (int i = 0; i < 1024; i++) {
            slices.add(Parts.Slice.of(chunk));
        }
        slices.set(1024, new Parts.Slice(chunk, 0, MIB - 8));
        assertEquals(1024, Parts.split(slices, 2).size(), "a frame of exactly 1 GiB goes in 1024 messages");
        slices.add(new Parts.Slice(chunk, 0, 1));
        ProtocolException e = assertThrows(ProtocolException.class, () -> Parts.split(slices, 2));
        assertTrue(e.getMessage().contains("1073741825"), e.getMessage());
    }

    // ------------------------------------------------------------------------------------ joiner errors

    static Stream<Arguments> badSequences() {
        byte[] big = frame(MessageType.MANIFEST.code(), 2, 2 * MIB + 10);
        List<byte[]> parts = split(big, 2);
        byte[] first = parts.get(0);
        byte[] middle = parts.get(1);
        byte[] last = parts.get(2);
        byte[] lonePart = Wire.frame(MessageType.PART, 2).raw(10, 1).bytes();
        byte[] loneContinuedPart = Wire.frame(MessageType.PART.code() | 0x8000, 2).raw(10, 1).bytes();
        byte[] v1Continued = Wire.frame(MessageType.MANIFEST.code() | 0x8000, 1).raw(10, 1).bytes();
        byte[] emptyPart = Wire.frame(MessageType.PART, 2).bytes();
        byte[] overlongPart = Wire.frame(MessageType.PART, 2).raw(MIB + 1, 1).bytes();
        byte[] emptyFirst = Wire.frame(MessageType.MANIFEST.code() | 0x8000, 2).bytes();
        return Stream.of(
                Arguments.of("a PART without a continued frame before it", List.of(lonePart), "PART"),
                Arguments.of("a continued PART without a frame before it", List.of(loneContinuedPart), "PART"),
                Arguments.of("a continued frame in version 1", List.of(v1Continued), "version"),
                Arguments.of("a PART encoded in another version", List.of(first, withVersion(middle, 1)), "version"),
                Arguments.of("a PART encoded in version 3", List.of(first, withVersion(last, 3)), "version"),
                Arguments.of("another frame where a PART is owed",
                        List.of(first, withType(middle, MessageType.STATUS_REPLY.code())), "PART"),
                Arguments.of("a second continued frame where a PART is owed", List.of(first, first), "PART"),
                Arguments.of("an empty PART", List.of(first, emptyPart), "1 to 1048576"),
                Arguments.of("a PART over 1 MiB", List.of(first, overlongPart), "1 to 1048576"),
                Arguments.of("an empty continued first message", List.of(emptyFirst), "1 to 1048576"),
                Arguments.of("a message shorter than a frame header", List.of(new byte[] {1, 2, 3}), "header"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("badSequences")
    void joinerRefuses(String label, List<byte[]> messages, String named) {
        Parts.Joiner j = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
        ProtocolException e = assertThrows(ProtocolException.class, () -> {
            for (byte[] m : messages) {
                j.feed(m);
            }
        }, label);
        assertTrue(e.getMessage().contains(named), label + ": " + e.getMessage());
    }

    @Test
    void joinerBoundsTheTotal() {
        byte[] big = frame(MessageType.STATUS_REPLY.code(), 2, 3 * MIB);
        List<byte[]> parts = split(big, 2);
        Parts.Joiner exact = new Parts.Joiner(8 + 3L * MIB);
        byte[] out = null;
        for (byte[] p : parts) {
            out = exact.feed(p);
        }
        assertArrayEquals(big, out, "a frame of exactly the bound is taken");

        Parts.Joiner tight = new Parts.Joiner(8 + 3L * MIB - 1);
        tight.feed(parts.get(0));
        tight.feed(parts.get(1));
        ProtocolException e = assertThrows(ProtocolException.class, () -> tight.feed(parts.get(2)));
        assertTrue(e.getMessage().contains(Long.toString(8 + 3L * MIB - 1)), "names the bound: " + e.getMessage());
    }

    @Test
    void aFrameWithTheContinuedBitUnsetIsCompleteInOneMessage() {
        Parts.Joiner j = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
        for (MessageType t : List.of(MessageType.WELCOME, MessageType.MANIFEST, MessageType.STATUS_REPLY,
                MessageType.ERROR, MessageType.STOP_ACK)) {
            for (int v : new int[] {1, 2}) {
                byte[] f = frame(t.code(), v, 100);
                assertArrayEquals(f, j.feed(f), t + " v" + v);
            }
        }
    }

    @Test
    void theJoinedFrameDecodes() {
        String json = "{\"pad\":\"" + "x".repeat(3 * MIB) + "\"}";
        byte[] frame = FrameRoundTripTest.array(Frames.statusReply(2, json));
        Parts.Joiner j = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
        byte[] out = null;
        for (byte[] p : split(frame, 2)) {
            out = j.feed(p);
        }
        FrameReader r = FrameReader.of(out);
        assertEquals(MessageType.STATUS_REPLY, r.type());
        assertEquals(2, r.version());
        assertEquals(json, Frames.decodeStatusReply(r));
    }
}
