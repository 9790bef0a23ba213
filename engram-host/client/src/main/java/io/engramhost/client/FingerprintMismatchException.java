package io.engramhost.client;

import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Expectation;
import io.engramhost.util.Text;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The daemon serves something else than the expectation ({@code FINGERPRINT_MISMATCH}), shown as
 * docs/checkpoints.md ("How a client shows a mismatch") says, the same as the Python client: {@link #summary()}, one
 * line, then {@link #shown()}: at most {@value #SHOWN_DIFFERENCES} of the daemon's differences and how many more
 * there are, or, for an expectation of a SHA-256, both SHA-256s and the daemon's record in short. The message is the
 * summary and those lines, each indented by two spaces. {@link #details()} keeps the daemon's lines as it sent them.
 */
public final class FingerprintMismatchException extends EngramClientException {
    private static final long serialVersionUID = 1L;
    /** At most this many differences are shown under the summary. */
    public static final int SHOWN_DIFFERENCES = 5;
    /** The line a daemon ends a longer list of differences with (docs/protocol.md, "IMPORT"). */
    private static final Pattern MORE = Pattern.compile("\\.\\.\\. and ([0-9]+) more differences?");

    private final String summary;
    private final transient List<String> shown;
    private final String daemonMessage;
    private final byte[] daemonFingerprint;

    private FingerprintMismatchException(String summary, List<String> shown, ErrorReply reply) {
        super(ErrorCode.FINGERPRINT_MISMATCH, reply.wireCode(), message(summary, shown), reply.details());
        this.summary = summary;
        this.shown = List.copyOf(shown);
        this.daemonMessage = reply.message();
        this.daemonFingerprint = reply.daemonFingerprint().clone();
    }

    private static String message(String summary, List<String> shown) {
        StringBuilder b = new StringBuilder(summary);
        shown.forEach(line -> b.append('\n').append("  ").append(Text.oneLine(line)));   // the daemon's words
        return b.toString();
    }

    /**
     * The refusal {@code reply} of {@code expectation} by the daemon on {@code socket}. Which form it takes is
     * chosen by the kind of expectation this client sent, not by the daemon's words.
     */
    static FingerprintMismatchException of(ErrorReply reply, Path socket, Expectation expectation) {
        byte[] fp = reply.daemonFingerprint();
        String served = fp.length == 0 ? null : HexFormat.of().formatHex(sha256(fp));
        String servedText = served == null ? "a fingerprint it did not send" : "fingerprint " + served;
        List<String> shown = new ArrayList<>();
        int count;
        if (expectation.kind() == Expectation.Kind.SHA256) {
            count = 1;
            shown.add("expected fingerprint " + HexFormat.of().formatHex(expectation.bytes()) + " but the daemon serves "
                    + (served == null ? servedText : served));
            if (fp.length > 0) {
                shown.add(recordInShort(fp));
            }
        } else {
            List<String> listed = new ArrayList<>(reply.details());
            Matcher m = listed.isEmpty() ? null : MORE.matcher(listed.get(listed.size() - 1));
            int unlisted = 0;
            if (m != null && m.matches()) {
                unlisted = Integer.parseInt(m.group(1));
                listed.remove(listed.size() - 1);
            }
            count = listed.size() + unlisted;
            shown.addAll(listed.subList(0, Math.min(SHOWN_DIFFERENCES, listed.size())));
            if (count > shown.size()) {
                shown.add("... and " + counted(count - shown.size(), "more difference"));
            }
        }
        String summary = ErrorCode.FINGERPRINT_MISMATCH.name() + ": the daemon on " + socket + " serves " + servedText
                + ", not the expected checkpoint: " + counted(count, "difference");
        return new FingerprintMismatchException(summary, shown, reply);
    }

    /** The daemon's fingerprint in one line: {@code the daemon serves 4 tables from 2 files: NAME, ...}. */
    private static String recordInShort(byte[] canonical) {
        Fingerprint fp;
        try {
            fp = Fingerprint.decode(canonical);
        } catch (RuntimeException e) {
            return "the daemon's record could not be decoded: " + e.getMessage();
        }
        String names = fp.tables().isEmpty() ? "" : ": " + fp.tables().get(0).name()
                + (fp.tables().size() > 1 ? ", ..." : "");
        return "the daemon serves " + counted(fp.tables().size(), "table") + " from "
                + counted(fp.files().size(), "file") + names;
    }

    /** {@code 1 table}, {@code 2 tables}. */
    static String counted(long n, String noun) {
        return n + " " + noun + (n == 1 ? "" : "s");
    }

    private static byte[] sha256(byte[] b) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(b);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /** The summary line. */
    public String summary() {
        return summary;
    }

    /** The lines shown under the summary. */
    public List<String> shown() {
        return shown;
    }

    /** The daemon's own message. */
    public String daemonMessage() {
        return daemonMessage;
    }

    /** The daemon's canonical fingerprint (empty when it sent none). */
    public byte[] daemonFingerprint() {
        return daemonFingerprint.clone();
    }
}
