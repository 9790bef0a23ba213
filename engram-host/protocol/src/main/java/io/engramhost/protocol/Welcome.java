package io.engramhost.protocol;

import java.nio.ByteBuffer;

/**
 * The daemon's answer to HELLO: the chosen version, who it is and what state it is in. Version 2
 * adds the daemon's effective uid, which a client compares with SO_PEERCRED (-1 when version 1).
 */
public record Welcome(int version, int pid, String daemonVersion, String backend, String instance, DaemonState state,
        int uid) {
    public ByteBuffer encode() {
        FrameWriter w = new FrameWriter(MessageType.WELCOME, version).u16(version).i32(pid).shortString(daemonVersion)
                .shortString(backend).shortString(instance).u8(state.code());
        if (version >= 2) {
            w.i32(uid);
        }
        return w.toBuffer();
    }

    /**
     * Decodes a WELCOME, which must be encoded in the version it chooses (the caller checks that the
     * version is one it offered).
     */
    public static Welcome decode(FrameReader r) {
        int version = r.u16("version");
        if (version != r.version()) {
            throw new ProtocolException("WELCOME chose version " + version + " in a frame of version " + r.version());
        }
        int pid = r.i32("pid");
        String daemonVersion = r.shortString("daemon_version");
        String backend = r.shortString("backend");
        String instance = r.shortString("instance");
        DaemonState state = DaemonState.of(r.u8("state"));
        int uid = version >= 2 ? r.i32("uid") : -1;
        r.end();
        return new Welcome(version, pid, daemonVersion, backend, instance, state, uid);
    }
}
