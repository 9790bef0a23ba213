package io.engramhost.protocol;

/**
 * The wire protocol's constants. docs/protocol.md is the specification; this class and the message
 * codecs are its code. Every frame's payload starts with:
 *
 * <pre>
 *   0               4               6               8
 *   +---------------+---------------+---------------+----------------
 *   | magic "EGRM"  | version u16   | type u16      | body ...
 *   +---------------+---------------+---------------+----------------
 * </pre>
 *
 * All integers are little-endian. Strings are a u16 (short) or u32 (long) byte length, then UTF-8.
 */
public final class ProtocolDescriptor {
    /** "EGRM" read as a little-endian u32. */
    public static final int MAGIC = 'E' | 'G' << 8 | 'R' << 16 | 'M' << 24;
    public static final int MIN_VERSION = 1;
    public static final int MAX_VERSION = 2;
    public static final int HEADER_BYTES = 8;

    /** Most payload bytes in one version-1 frame (version 2 sends longer frames in parts). */
    public static final int MAX_PAYLOAD = 64 << 20;
    /** Version 2: the type bit that says a frame continues in PART messages. */
    public static final int CONTINUED = 0x8000;
    /** Version 2: most body bytes in one message of a frame sent in parts. */
    public static final int MAX_PART_BODY = 1 << 20;
    /** Version 2: most payload bytes in one daemon message, a piece of a body and its frame header. */
    public static final int MAX_V2_PAYLOAD = MAX_PART_BODY + HEADER_BYTES;
    /** Most payload bytes in a daemon message before a version is chosen (an ERROR, or the WELCOME). */
    public static final int MAX_PRE_VERSION_PAYLOAD = 64 << 10;
    /** Version 2: most bytes of a frame, all its parts together. */
    public static final int MAX_FRAME = 1 << 30;
    /** The largest valid HELLO: header, two u16, an i32 and a str16 of 4096 bytes. */
    public static final int MAX_HELLO = HEADER_BYTES + 2 + 2 + 4 + 2 + 4096;
    /** Most detail lines in an ERROR: 100 differences and one line counting the rest. */
    public static final int MAX_DETAILS = 101;
    /** Most GPU ordinal an IMPORT may name. */
    public static final int MAX_DEVICE = 1023;
    /** Most fds with one frame (a manifest). */
    public static final int MAX_FDS = 65536;
    public static final int MAX_TABLES = 1 << 20;
    public static final int MAX_RANK = 16;
    public static final int MAX_SHORT_STRING = 4096;
    public static final int MAX_FINGERPRINT = 16 << 20;
    /** Most payload bytes the daemon accepts in a client's frame: an IMPORT with the largest fingerprint. */
    public static final int MAX_REQUEST = MAX_FINGERPRINT + (64 << 10);

    /** Timeout for each request frame a peer owes during the handshake. */
    public static final int DEFAULT_REQUEST_TIMEOUT_MILLIS = 10_000;

    private ProtocolDescriptor() {
    }

    /** Picks the highest version both sides speak, or -1 when their ranges do not overlap. */
    public static int negotiate(int clientMin, int clientMax) {
        int v = Math.min(clientMax, MAX_VERSION);
        return v >= Math.max(clientMin, MIN_VERSION) ? v : -1;
    }
}
