package io.engramhost.daemon;

import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.NonBlocking;
import io.engramhost.protocol.Parts;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * The bytes (and fds) owed to one peer: the messages of one answer, laid out as segments that the
 * poll loop writes as the socket takes them. Segments point into the frames' arrays (a catalog's
 * manifest is shared, not copied). fds ride on the first byte of their segment; they stay owned by
 * the catalog, which outlives every connection.
 */
final class Outbound {
    private static final int[] NO_FDS = new int[0];

    private record Segment(byte[] array, int offset, int length, int[] fds) {
    }

    private final List<Segment> segments = new ArrayList<>();
    private int index;
    private int written;

    /** The messages that carry {@code frame} in {@code version}, fds with the first (docs/protocol.md). */
    static Outbound frame(List<Parts.Slice> frame, int version, List<Fd> fds) {
        Outbound out = new Outbound();
        List<Parts.Message> messages;
        try {
            messages = Parts.split(frame, version);
        } catch (io.engramhost.protocol.ProtocolException e) {
            // an answer too large for the client's version: the daemon's limit, not the client's mistake (INTERNAL)
            throw new IllegalStateException(e.getMessage(), e);
        }
        int[] raw = new int[fds.size()];
        for (int i = 0; i < raw.length; i++) {
            raw[i] = fds.get(i).get();
        }
        for (int m = 0; m < messages.size(); m++) {
            Parts.Message msg = messages.get(m);
            int fdCount = m == 0 ? raw.length : 0;
            byte[] header = ByteBuffer.allocate(FdMessages.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN)
                    .putInt(msg.length()).putInt(fdCount).array();
            int first = Math.min(fdCount, FdMessages.MAX_FDS_PER_SENDMSG);
            out.add(header, 0, header.length, java.util.Arrays.copyOfRange(raw, 0, first));
            for (Parts.Slice s : msg.slices()) {
                out.add(s.array(), s.offset(), s.length(), NO_FDS);
            }
            for (int at = first; at < fdCount; at += FdMessages.MAX_FDS_PER_SENDMSG) {
                int n = Math.min(FdMessages.MAX_FDS_PER_SENDMSG, fdCount - at);
                out.add(new byte[] {FdMessages.FILLER}, 0, 1, java.util.Arrays.copyOfRange(raw, at, at + n));
            }
        }
        return out;
    }

    /** One frame held in one array. */
    static Outbound frame(ByteBuffer frame, int version) {
        byte[] a = new byte[frame.remaining()];
        frame.duplicate().get(a);
        return frame(List.of(Parts.Slice.of(a)), version, List.of());
    }

    private void add(byte[] a, int off, int len, int[] fds) {
        if (len > 0) {
            segments.add(new Segment(a, off, len, fds));
        }
    }

    /** Writes what the socket takes now; true once everything is written. */
    boolean flush(int fd, NonBlocking.Scratch scratch) {
        while (index < segments.size()) {
            Segment s = segments.get(index);
            int n = NonBlocking.send(fd, scratch, s.array, s.offset + written, s.length - written,
                    written == 0 ? s.fds : NO_FDS);
            if (n == NonBlocking.WOULD_BLOCK) {
                return false;
            }
            written += n;
            if (written == s.length) {
                index++;
                written = 0;
            }
        }
        return true;
    }

    /** Nothing written yet: the answer can still be replaced or dropped whole. */
    boolean untouched() {
        return index == 0 && written == 0;
    }
}
