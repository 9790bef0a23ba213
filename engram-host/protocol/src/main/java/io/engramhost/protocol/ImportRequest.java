package io.engramhost.protocol;

import java.nio.ByteBuffer;

/**
 * Asks for the manifest and the fds; the connection then stays open as the client's lease.
 * {@code device} is the client's GPU ordinal (-1: none): the daemon adds that GPU's device tensors.
 */
public record ImportRequest(int flags, int device, Expectation expectation) {
    public ByteBuffer encode(int version) {
        FrameWriter w = new FrameWriter(MessageType.IMPORT, version).i32(flags).i32(device);
        expectation.encode(w);
        return w.toBuffer();
    }

    public static ImportRequest decode(FrameReader r) {
        ImportRequest q = new ImportRequest(r.i32("flags"), r.i32("device"), Expectation.decode(r));
        r.end();
        return q;
    }
}
