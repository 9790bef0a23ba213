package io.engramhost.protocol;

import java.util.Locale;

/** A daemon's life: loading its tables, serving them, or shutting down. Stable wire codes. */
public enum DaemonState {
    LOADING(0),
    READY(1),
    STOPPING(2),
    FAILED(3);

    private final int code;

    DaemonState(int code) {
        this.code = code;
    }

    public int code() {
        return code;
    }

    public String wireName() {
        return name().toLowerCase(Locale.ROOT);
    }

    public static DaemonState of(int code) {
        for (DaemonState s : values()) {
            if (s.code == code) {
                return s;
            }
        }
        throw new ProtocolException("unknown daemon state " + code);
    }
}
