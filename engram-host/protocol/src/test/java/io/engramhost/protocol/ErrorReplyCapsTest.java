package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * ERROR's limits (docs/protocol.md, "ERROR"): at most 101 details, every line at most 4096 bytes, and
 * a list of differences that is too long ends with "... and N more differences". What the codec
 * builds must always decode.
 */
class ErrorReplyCapsTest {

    static List<String> lines(int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add("table 't" + i + "': missing");
        }
        return out;
    }

    static ErrorReply roundTrip(ErrorReply e, int version) {
        return ErrorReply.decode(FrameReader.of(e.encode(version)));
    }

    static Stream<Arguments> detailCounts() {
        return Stream.of(Arguments.of(0), Arguments.of(1), Arguments.of(100), Arguments.of(101));
    }

    @ParameterizedTest(name = "{0} details")
    @MethodSource("detailCounts")
    void upToOneHundredAndOneDetailsGoAsTheyAre(int n) {
        List<String> details = lines(n);
        ErrorReply e = new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, "mismatch", details, new byte[0]);
        assertEquals(details, e.details());
        assertEquals(details, roundTrip(e, 2).details());
    }

    static Stream<Arguments> tooMany() {
        return Stream.of(Arguments.of(102, 2), Arguments.of(150, 50), Arguments.of(100_000, 99_900));
    }

    @ParameterizedTest(name = "{0} details -> 100 and '... and {1} more differences'")
    @MethodSource("tooMany")
    void moreAreCutToOneHundredAndACount(int n, int more) {
        List<String> details = lines(n);
        ErrorReply e = new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, "mismatch", details, new byte[0]);
        assertEquals(101, e.details().size());
        assertEquals(details.subList(0, 100), e.details().subList(0, 100));
        assertEquals("... and " + more + " more differences", e.details().get(100));
        assertEquals(e.details(), roundTrip(e, 1).details());
    }

    static Stream<Arguments> longLines() {
        return Stream.of(
                Arguments.of("x".repeat(4096), false),
                Arguments.of("x".repeat(4097), true),
                Arguments.of("é".repeat(2048), false),
                Arguments.of("é".repeat(2049), true),
                Arguments.of("x" + "é".repeat(3000), true),
                Arguments.of("名".repeat(2000), true),
                Arguments.of("😀".repeat(1500), true));
    }

    @ParameterizedTest
    @MethodSource("longLines")
    void linesAreClippedToFourKibibytesOfUtf8(String line, boolean clipped) {
        ErrorReply e = new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, line, List.of(line, "short"), new byte[0]);
        for (String s : List.of(e.message(), e.details().get(0))) {
            int bytes = s.getBytes(StandardCharsets.UTF_8).length;
            assertTrue(bytes <= 4096, "at most 4096 bytes: " + bytes);
            if (clipped) {
                assertTrue(s.endsWith("..."), "a clipped line is marked");
                assertTrue(line.startsWith(s.substring(0, s.length() - 3)), "clipped at a character boundary");
                assertTrue(bytes > 4096 - 4, "no more is cut than needed: " + bytes);
            } else {
                assertEquals(line, s);
            }
        }
        assertEquals("short", e.details().get(1));
        ErrorReply d = roundTrip(e, 2);
        assertEquals(e.message(), d.message());
        assertEquals(e.details(), d.details());
    }

    @Test
    void aLargeFingerprintTravels() {
        byte[] fp = new byte[3 << 20];
        new java.util.Random(1).nextBytes(fp);
        ErrorReply e = new ErrorReply(ErrorCode.FINGERPRINT_MISMATCH, "m", lines(150), fp);
        byte[] frame = FrameRoundTripTest.array(e.encode(2));
        Parts.Joiner j = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
        byte[] out = null;
        List<Parts.Message> messages = Parts.split(List.of(Parts.Slice.of(frame)), 2);
        assertEquals(4, messages.size(), "an ERROR with a large fingerprint goes in parts");
        for (Parts.Message m : messages) {
            out = j.feed(PartsTest.payload(m));
        }
        ErrorReply d = ErrorReply.decode(FrameReader.of(out));
        assertEquals(101, d.details().size());
        assertTrue(java.util.Arrays.equals(fp, d.daemonFingerprint()));
    }
}
