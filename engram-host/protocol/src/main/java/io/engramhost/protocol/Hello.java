package io.engramhost.protocol;

import java.nio.ByteBuffer;

/** Client's first frame: the version range it speaks, its pid and a name for logs. */
public record Hello(int minVersion, int maxVersion, int pid, String client) {
    public ByteBuffer encode() {
        return new FrameWriter(MessageType.HELLO, 1).u16(minVersion).u16(maxVersion).i32(pid).shortString(client)
                .toBuffer();
    }

    /** Decodes and checks: encoded as version 1, {@code 1 <= min_version <= max_version}, a name of at most 4096 bytes. */
    public static Hello decode(FrameReader r) {
        r.requireVersion(1);
        Hello h = new Hello(r.u16("min_version"), r.u16("max_version"), r.i32("pid"), r.shortString("client"));
        r.end();
        if (h.minVersion < 1) {
            throw new ProtocolException("HELLO: min_version " + h.minVersion + " is below 1");
        }
        if (h.minVersion > h.maxVersion) {
            throw new ProtocolException("HELLO: min_version " + h.minVersion + " is above max_version " + h.maxVersion);
        }
        return h;
    }
}
