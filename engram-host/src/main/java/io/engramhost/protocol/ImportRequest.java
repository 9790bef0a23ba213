package io.engramhost.protocol;

import java.nio.ByteBuffer;

/** Asks for the manifest and the fds; the connection then stays open as the client's lease. */
public record ImportRequest(int flags, Expectation expectation) {
    public ByteBuffer encode(int version) {
        FrameWriter w = new FrameWriter(MessageType.IMPORT, version).i32(flags);
        expectation.encode(w);
        return w.toBuffer();
    }

    public static ImportRequest decode(FrameReader r) {
        ImportRequest q = new ImportRequest(r.i32("flags"), Expectation.decode(r));
        r.end();
        return q;
    }
}
