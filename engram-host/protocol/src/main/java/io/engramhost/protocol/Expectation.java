package io.engramhost.protocol;

import java.util.HexFormat;
import java.util.Locale;

/**
 * What a client expects the daemon to serve: anything, a short fingerprint (the SHA-256 of the
 * canonical encoding), or the structured fingerprint itself (canonical bytes).
 */
public record Expectation(Kind kind, byte[] bytes) {
    public enum Kind {
        ANY(0), SHA256(1), STRUCTURED(2);

        final int code;

        Kind(int code) {
            this.code = code;
        }

        static Kind of(int code) {
            for (Kind k : values()) {
                if (k.code == code) {
                    return k;
                }
            }
            throw new ProtocolException("IMPORT: unknown expectation kind " + code);
        }
    }

    public static Expectation any() {
        return new Expectation(Kind.ANY, new byte[0]);
    }

    /** From 64 hex digits (upper or lower case). */
    public static Expectation sha256(String hex) {
        String h = hex.trim();
        if (!h.matches("[0-9a-fA-F]{64}")) {
            throw new IllegalArgumentException("expected fingerprint must be 64 hex digits (a SHA-256), got '" + hex + "'");
        }
        return new Expectation(Kind.SHA256, HexFormat.of().parseHex(h.toLowerCase(Locale.ROOT)));
    }

    public static Expectation structured(byte[] canonical) {
        return new Expectation(Kind.STRUCTURED, canonical.clone());
    }

    void encode(FrameWriter w) {
        w.u8(kind.code);
        switch (kind) {
            case ANY -> { }
            case SHA256 -> w.raw(bytes);
            case STRUCTURED -> w.blob(bytes);
        }
    }

    static Expectation decode(FrameReader r) {
        Kind k = Kind.of(r.u8("expectation_kind"));
        return switch (k) {
            case ANY -> any();
            case SHA256 -> new Expectation(k, r.raw(32, "expected_sha256"));
            case STRUCTURED -> new Expectation(k, r.blob("expected_fingerprint", ProtocolDescriptor.MAX_FINGERPRINT));
        };
    }
}
