package io.engramhost.protocol;

/** Frame types, with their stable wire codes. Codes 16-31 are reserved for daemon-to-daemon handover. */
public enum MessageType {
    HELLO(1),
    WELCOME(2),
    IMPORT(3),
    MANIFEST(4),
    STATUS(5),
    STATUS_REPLY(6),
    STOP(7),
    STOP_ACK(8),
    ERROR(9),
    BYE(10),
    /** Version 2: the next piece of a frame sent in parts (docs/protocol.md, "Parts"). */
    PART(11);

    private final int code;

    MessageType(int code) {
        this.code = code;
    }

    public int code() {
        return code;
    }

    public static MessageType of(int code) {
        for (MessageType t : values()) {
            if (t.code == code) {
                return t;
            }
        }
        throw new ProtocolException("unknown message type " + code);
    }
}
