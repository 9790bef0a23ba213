package io.engramhost.protocol;

/** Frame types, with their stable wire codes. Codes 16-21 are the daemon-to-daemon handover;
 * 22-31 stay reserved for it. */
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
    PART(11),
    /** Handover (docs/protocol.md, "Handing over to a successor daemon"): successor to predecessor. */
    TAKEOVER(16),
    /** Predecessor to successor: the catalog, the listening socket and every region fd. */
    HANDOVER_CATALOG(17),
    /** Successor to predecessor: the catalog checked, ready to own it. */
    HANDOVER_READY(18),
    /** Predecessor to successor: the lock and every connection; it serves nothing more unless this fails. */
    HANDOVER_COMMIT(19),
    /** Successor to predecessor: everything installed; the commit point. */
    HANDOVER_DONE(20),
    /** Successor to predecessor: the successor refuses what it got, with a reason for the log. */
    HANDOVER_ABORT(21);

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
