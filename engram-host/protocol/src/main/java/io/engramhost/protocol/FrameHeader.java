package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The checks a client's request passes on its frame header alone (magic, version, type, and the length an empty
 * body allows), in the phase its connection is in. The daemon's poll loop makes them as soon as the header's 8
 * bytes arrive, before it reserves memory for the rest, and its request handler again on the whole frame: one rule,
 * in one place.
 */
public final class FrameHeader {
    private FrameHeader() {
    }

    /**
     * The type of the request whose frame starts at {@code frame[0]} and holds {@code frameLength} bytes in all,
     * once it is one a client may send in {@code phase} on a connection that chose {@code version}.
     *
     * @throws ProtocolException naming what is wrong
     */
    public static MessageType checkRequest(ConnectionPhase phase, int version, byte[] frame, int frameLength) {
        if (frameLength < ProtocolDescriptor.HEADER_BYTES || frame.length < ProtocolDescriptor.HEADER_BYTES) {
            throw new ProtocolException("frame of " + frameLength + " bytes is shorter than the 8-byte header");
        }
        ByteBuffer h = ByteBuffer.wrap(frame, 0, ProtocolDescriptor.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        int magic = h.getInt(0);
        int got = h.getShort(4) & 0xffff;
        int code = h.getShort(6) & 0xffff;
        if (magic != ProtocolDescriptor.MAGIC) {
            throw new ProtocolException("bad magic 0x" + Integer.toHexString(magic) + ": not an engram-host frame");
        }
        int expected = phase.frameVersion(version);
        if (got != expected) {
            throw new ProtocolException(typeName(code) + " encoded as version " + got + ", but version " + expected
                    + (phase == ConnectionPhase.HELLO ? " is required for HELLO" : " was chosen"));
        }
        if (phase == ConnectionPhase.HELLO) {
            if (code != MessageType.HELLO.code()) {
                throw new ProtocolException("expected HELLO first, got " + typeName(code));
            }
            return MessageType.HELLO;
        }
        boolean empty = code == MessageType.STATUS.code() || code == MessageType.STOP.code()
                || code == MessageType.BYE.code();
        if (empty && frameLength != ProtocolDescriptor.HEADER_BYTES) {
            throw new ProtocolException(typeName(code) + " has an empty body, but the message holds "
                    + (frameLength - ProtocolDescriptor.HEADER_BYTES) + " bytes after the frame header");
        }
        if (phase == ConnectionPhase.LEASE && code != MessageType.BYE.code()) {
            throw new ProtocolException("unexpected " + typeName(code) + " on a lease");
        }
        if (!empty && code != MessageType.IMPORT.code() && code != MessageType.TAKEOVER.code()) {
            throw new ProtocolException(typeName(code) + " is not a request a client may send now");
        }
        return MessageType.of(code);
    }

    /** A type code as a name where it is one ("STATUS (type 5)"), else "type N". */
    static String typeName(int code) {
        for (MessageType t : MessageType.values()) {
            if (t.code() == code) {
                return t + " (type " + code + ")";
            }
        }
        return "type " + code;
    }
}
