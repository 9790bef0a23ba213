package io.engramhost.protocol;

import io.engramhost.util.Text;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A refusal or failure: a code, a one-line message, detail lines (e.g. the fingerprint differences)
 * and, for a fingerprint mismatch, the daemon's structured fingerprint (else empty). {@code code} is
 * null when the wire code is one this version does not know; {@code wireCode} keeps the number.
 */
public record ErrorReply(ErrorCode code, int wireCode, String message, List<String> details, byte[] daemonFingerprint) {
    /** At most this many differences are listed; a last line counts the rest. */
    public static final int MAX_LISTED = ProtocolDescriptor.MAX_DETAILS - 1;

    public ErrorReply(ErrorCode code, String message, List<String> details, byte[] daemonFingerprint) {
        this(code, code.code(), clip(message), cap(details), daemonFingerprint);
    }

    public static ErrorReply of(ErrorCode code, String message) {
        return new ErrorReply(code, message, List.of(), new byte[0]);
    }

    /**
     * At most {@link ProtocolDescriptor#MAX_DETAILS} lines: a longer list keeps its first
     * {@link #MAX_LISTED}, then "... and N more differences". Each line is clipped to 4096 bytes.
     */
    static List<String> cap(List<String> details) {
        boolean fits = details.size() <= ProtocolDescriptor.MAX_DETAILS;
        List<String> out = new ArrayList<>(Math.min(details.size(), ProtocolDescriptor.MAX_DETAILS));
        for (int i = 0; i < details.size() && (fits || i < MAX_LISTED); i++) {
            out.add(clip(details.get(i)));
        }
        if (!fits) {
            out.add("... and " + (details.size() - MAX_LISTED) + " more differences");
        }
        return List.copyOf(out);
    }

    /** Cuts a line to at most 4096 bytes of UTF-8, at a character boundary, marking the cut with "...". */
    static String clip(String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length <= ProtocolDescriptor.MAX_SHORT_STRING) {
            return s;
        }
        int n = ProtocolDescriptor.MAX_SHORT_STRING - 3;
        while (n > 0 && (b[n] & 0xC0) == 0x80) {
            n--;
        }
        return new String(b, 0, n, StandardCharsets.UTF_8) + "...";
    }

    public boolean retryable() {
        return code != null && code.retryable();
    }

    /** The code's name, or "code N" for one this version does not know. */
    public String codeName() {
        return code != null ? code.name() : "code " + wireCode;
    }

    /**
     * The frame as slices: everything up to the fingerprint's length, then {@link #daemonFingerprint} itself, not
     * copied. A daemon sends its fingerprint (up to 16 MiB) with every FINGERPRINT_MISMATCH; shared, the answers owed
     * to many peers at once do not each hold a copy.
     */
    public List<Parts.Slice> encodeSlices(int version) {
        FrameWriter w = new FrameWriter(MessageType.ERROR, version).u16(wireCode).u8(retryable() ? 1 : 0)
                .longString(message).i32(details.size());
        details.forEach(w::longString);
        byte[] head = w.i32(daemonFingerprint.length).toArray();
        if (head.length + (long) daemonFingerprint.length > ProtocolDescriptor.MAX_FRAME) {
            throw new ProtocolException("frame of " + (head.length + (long) daemonFingerprint.length) + " bytes exceeds "
                    + ProtocolDescriptor.MAX_FRAME);
        }
        return daemonFingerprint.length == 0 ? List.of(Parts.Slice.of(head))
                : List.of(Parts.Slice.of(head), Parts.Slice.of(daemonFingerprint));
    }

    public ByteBuffer encode(int version) {
        FrameWriter w = new FrameWriter(MessageType.ERROR, version).u16(wireCode).u8(retryable() ? 1 : 0)
                .longString(message).i32(details.size());
        details.forEach(w::longString);
        return w.blob(daemonFingerprint).toBuffer();
    }

    public static ErrorReply decode(FrameReader r) {
        int wire = r.u16("code");
        r.u8("retryable");
        String message = r.longString("message", ProtocolDescriptor.MAX_SHORT_STRING);
        int n = r.count("detail_count", ProtocolDescriptor.MAX_DETAILS);
        List<String> details = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            details.add(r.longString("detail", ProtocolDescriptor.MAX_SHORT_STRING));
        }
        byte[] fp = r.blob("daemon_fingerprint", ProtocolDescriptor.MAX_FINGERPRINT);
        r.end();
        return new ErrorReply(ErrorCode.of(wire), wire, message, List.copyOf(details), fp);
    }

    /**
     * The message with the details, one per line, for an exception or a log; what the daemon sent is kept on its
     * lines ({@link Text#oneLine}: a control character in it is escaped).
     */
    public String describe() {
        StringBuilder b = new StringBuilder(Text.oneLine(message));
        for (String d : details) {
            b.append(System.lineSeparator()).append("  - ").append(Text.oneLine(d));
        }
        return b.toString();
    }
}
