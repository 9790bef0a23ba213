package io.engramhost.store;

import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.ProtocolException;
import java.util.HexFormat;
import java.util.List;

/** Compares a client's expectation with the daemon's fingerprint. */
final class FingerprintMatch implements Catalog.FingerprintCheck {
    /**
     * Structured expectations up to this size are decoded and their differences listed; larger ones are
     * compared without decoding their lists ({@link Fingerprint#differencesFromEncoded}), so that no request
     * makes the daemon build a large object graph.
     */
    static final int DETAILED_EXPECTATION = 1 << 20;

    private final Fingerprint served;
    private final String sha;
    /** The served fingerprint's canonical bytes: the catalog's manifests carry the same array. */
    private final byte[] encoded;

    FingerprintMatch(Fingerprint served, byte[] canonical) {
        this.served = served;
        this.sha = served.sha256Hex();
        this.encoded = canonical;
    }

    @Override
    public List<String> differences(Expectation expectation) {
        return switch (expectation.kind()) {
            case ANY -> List.of();
            case SHA256 -> {
                String expected = HexFormat.of().formatHex(expectation.bytes());
                yield expected.equals(sha) ? List.of()
                        : List.of("expected fingerprint " + expected + " but the daemon serves " + sha);
            }
            case STRUCTURED -> {
                if (expectation.bytes().length > DETAILED_EXPECTATION) {
                    try {
                        yield Fingerprint.differencesFromEncoded(expectation.bytes(), encoded);
                    } catch (RuntimeException e) {
                        throw new ProtocolException("IMPORT: the expected structured fingerprint is malformed: "
                                + e.getMessage());
                    }
                }
                Fingerprint expected;
                try {
                    expected = Fingerprint.decode(expectation.bytes());
                } catch (RuntimeException e) {
                    throw new ProtocolException("IMPORT: the expected structured fingerprint is malformed: "
                            + e.getMessage());
                }
                yield expected.differences(served, ErrorReply.MAX_LISTED);
            }
        };
    }
}
