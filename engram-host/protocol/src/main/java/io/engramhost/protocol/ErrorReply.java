package io.engramhost.protocol;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * A refusal or failure: a code, a one-line message, detail lines (e.g. the fingerprint differences)
 * and, for a fingerprint mismatch, the daemon's structured fingerprint (else empty).
 */
public record ErrorReply(ErrorCode code, String message, List<String> details, byte[] daemonFingerprint) {
    public static ErrorReply of(ErrorCode code, String message) {
        return new ErrorReply(code, message, List.of(), new byte[0]);
    }

    public ByteBuffer encode(int version) {
        FrameWriter w = new FrameWriter(MessageType.ERROR, version).u16(code.code()).u8(code.retryable() ? 1 : 0)
                .longString(message).i32(details.size());
        details.forEach(w::longString);
        return w.blob(daemonFingerprint).toBuffer();
    }

    public static ErrorReply decode(FrameReader r) {
        ErrorCode code = ErrorCode.of(r.u16("code"));
        r.u8("retryable");
        String message = r.longString("message");
        int n = r.count("detail_count", 1 << 16);
        List<String> details = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            details.add(r.longString("detail"));
        }
        byte[] fp = r.blob("daemon_fingerprint", ProtocolDescriptor.MAX_FINGERPRINT);
        r.end();
        return new ErrorReply(code, message, List.copyOf(details), fp);
    }

    /** The message with the details, one per line, for an exception or a log. */
    public String describe() {
        StringBuilder b = new StringBuilder(message);
        for (String d : details) {
            b.append(System.lineSeparator()).append("  - ").append(d);
        }
        return b.toString();
    }
}
