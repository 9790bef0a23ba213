package io.engramhost.daemon.loop;

import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.NonBlocking;
import io.engramhost.protocol.Parts;
import io.engramhost.protocol.ProtocolException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * The bytes (and fds) owed to one peer: the messages of one answer, laid out by the one message codec
 * ({@link FdMessages#layout}) as segments that the poll loop writes as the socket takes them. Segments point into
 * the frames' arrays (a catalog's manifest is shared, not copied). fds ride on the first byte of their segment; they
 * stay owned by the catalog, which outlives every connection.
 */
final class Outbound {
    private static final int[] NO_FDS = new int[0];

    private final List<FdMessages.Segment> segments;
    private int index;
    private int written;

    private Outbound(List<FdMessages.Segment> segments) {
        this.segments = segments;
    }

    /** The messages that carry {@code frame} in {@code version}, fds with the first (docs/protocol.md). */
    static Outbound frame(List<Parts.Slice> frame, int version, List<Fd> fds) {
        List<Parts.Message> messages;
        try {
            messages = Parts.split(frame, version);
        } catch (ProtocolException e) {
            // an answer too large for the client's version: the daemon's limit, not the client's mistake (INTERNAL)
            throw new IllegalStateException(e.getMessage(), e);
        }
        List<FdMessages.Segment> out = new ArrayList<>();
        for (int m = 0; m < messages.size(); m++) {
            List<FdMessages.Segment> payload = new ArrayList<>();
            for (Parts.Slice s : messages.get(m).slices()) {
                payload.add(FdMessages.Segment.of(s.array(), s.offset(), s.length()));
            }
            out.addAll(FdMessages.layout(payload, m == 0 ? FdMessages.raw(fds) : NO_FDS));
        }
        return new Outbound(out);
    }

    /** One frame held in one array. */
    static Outbound frame(ByteBuffer frame, int version) {
        byte[] a = new byte[frame.remaining()];
        frame.duplicate().get(a);
        return frame(List.of(Parts.Slice.of(a)), version, List.of());
    }

    /** Writes what the socket takes now; true once everything is written. */
    boolean flush(int fd, NonBlocking.Scratch scratch) {
        while (index < segments.size()) {
            FdMessages.Segment s = segments.get(index);
            int n = NonBlocking.send(fd, scratch, s.array(), s.offset() + written, s.length() - written,
                    written == 0 ? s.fds() : NO_FDS);
            if (n == NonBlocking.WOULD_BLOCK) {
                return false;
            }
            written += n;
            if (written == s.length()) {
                index++;
                written = 0;
            }
        }
        return true;
    }
}
