package io.engramhost.protocol;

import java.nio.ByteBuffer;

/** Frames with no body or a single text body: STATUS, STATUS_REPLY, STOP, STOP_ACK, BYE. */
public final class Frames {
    private Frames() {
    }

    public static ByteBuffer empty(MessageType type, int version) {
        return new FrameWriter(type, version).toBuffer();
    }

    /** STATUS_REPLY: a u32-length UTF-8 JSON document (see docs/protocol.md for its fields). */
    public static ByteBuffer statusReply(int version, String json) {
        return new FrameWriter(MessageType.STATUS_REPLY, version).longString(json).toBuffer();
    }

    /** Decodes a STATUS_REPLY: its json is at most 1 GiB (docs/protocol.md; in version 2 it arrives in parts). */
    public static String decodeStatusReply(FrameReader r) {
        String json = r.longString("status_json", ProtocolDescriptor.MAX_FRAME - ProtocolDescriptor.HEADER_BYTES - 4);
        r.end();
        return json;
    }
}
