package io.engramhost.protocol;

import java.nio.ByteBuffer;

/**
 * Asks for the manifest and the fds; the connection then stays open as the client's lease.
 * {@code device} is the client's GPU ordinal (-1: none): the daemon adds that GPU's device tensors.
 * {@code flags} is reserved and must be 0.
 */
public record ImportRequest(int flags, int device, Expectation expectation) {
    public ByteBuffer encode(int version) {
        FrameWriter w = new FrameWriter(MessageType.IMPORT, version).i32(flags).i32(device);
        expectation.encode(w);
        return w.toBuffer();
    }

    public static ImportRequest decode(FrameReader r) {
        int flags = r.i32("flags");
        if (flags != 0) {
            throw new ProtocolException("IMPORT: flags must be 0 (reserved), got " + flags);
        }
        int device = r.i32("device");
        if (device < -1 || device > ProtocolDescriptor.MAX_DEVICE) {
            throw new ProtocolException("IMPORT: device " + device + " is neither -1 nor a GPU ordinal 0-"
                    + ProtocolDescriptor.MAX_DEVICE);
        }
        ImportRequest q = new ImportRequest(flags, device, Expectation.decode(r));
        r.end();
        return q;
    }
}
