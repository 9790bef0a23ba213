package io.engramhost.protocol;

import java.nio.ByteBuffer;

/** The daemon's answer to HELLO: the chosen version, who it is and what state it is in. */
public record Welcome(int version, int pid, String daemonVersion, String backend, String instance, DaemonState state) {
    public ByteBuffer encode() {
        return new FrameWriter(MessageType.WELCOME, version).u16(version).i32(pid).shortString(daemonVersion)
                .shortString(backend).shortString(instance).u8(state.code()).toBuffer();
    }

    public static Welcome decode(FrameReader r) {
        Welcome w = new Welcome(r.u16("version"), r.i32("pid"), r.shortString("daemon_version"),
                r.shortString("backend"), r.shortString("instance"), DaemonState.of(r.u8("state")));
        r.end();
        return w;
    }
}
