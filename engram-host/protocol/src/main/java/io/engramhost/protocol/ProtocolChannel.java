package io.engramhost.protocol;

import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.FdRef;
import io.engramhost.os.ReceiveTimeoutException;
import io.engramhost.os.UnixConnection;
import java.nio.ByteBuffer;
import java.util.List;

/** Frames over a {@link UnixConnection}: send with fds, receive with a timeout and limits. */
public final class ProtocolChannel implements AutoCloseable {
    private final UnixConnection connection;

    public ProtocolChannel(UnixConnection connection) {
        this.connection = connection;
    }

    public UnixConnection connection() {
        return connection;
    }

    public void send(ByteBuffer frame) {
        connection.send(frame, List.of());
    }

    public void send(ByteBuffer frame, List<? extends FdRef> fds) {
        connection.send(frame, fds);
    }

    /** A received frame: its reader (header checked) and the fds that came with it. */
    public static final class Incoming implements AutoCloseable {
        private final FrameReader reader;
        private final byte[] frame;
        private List<Fd> fds;

        Incoming(byte[] frame, List<Fd> fds) {
            this.reader = FrameReader.of(frame);
            this.frame = frame;
            this.fds = fds;
        }

        /** The whole frame, header included, as received (for a codec that checks a checksum over it). */
        public byte[] frame() {
            return frame;
        }

        public FrameReader reader() {
            return reader;
        }

        public MessageType type() {
            return reader.type();
        }

        public int fdCount() {
            return fds.size();
        }

        /** Takes the fds: the caller now owns them, and {@link #close()} leaves them alone. */
        public List<Fd> takeFds() {
            List<Fd> out = fds;
            fds = List.of();
            return out;
        }

        /** Closes the fds that came with the frame and were not taken. */
        @Override
        public void close() {
            fds.forEach(Fd::close);
            fds = List.of();
        }
    }

    /** Receives one frame of at most {@link ProtocolDescriptor#MAX_PAYLOAD} bytes. */
    public Incoming receive(int maxFds, int timeoutMillis) {
        return receive(ProtocolDescriptor.MAX_PAYLOAD, maxFds, timeoutMillis);
    }

    /**
     * Receives one frame, putting a version-2 frame sent in parts back together (all of its parts within
     * {@code timeoutMillis} of the call, -1: no bound; the whole within {@link ProtocolDescriptor#MAX_FRAME}); fds with
     * a frame that fails to decode are closed.
     */
    public Incoming receive(int maxPayload, int maxFds, int timeoutMillis) {
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000L; // the whole answer, every part of it
        FdMessages.Received m = connection.receive(maxPayload, maxFds, timeoutMillis);
        try {
            Parts.Joiner joiner = new Parts.Joiner(ProtocolDescriptor.MAX_FRAME);
            byte[] frame = joiner.feed(bytes(m.payload()));
            while (frame == null) {
                long left = (deadline - System.nanoTime()) / 1_000_000L;
                if (timeoutMillis >= 0 && left <= 0) {
                    throw new ReceiveTimeoutException("timed out waiting for " + connection.peer() + ": the answer's"
                            + " parts did not all arrive within " + timeoutMillis + " ms");
                }
                FdMessages.Received part = connection.receive(ProtocolDescriptor.MAX_V2_PAYLOAD, 0,
                        timeoutMillis < 0 ? -1 : (int) Math.max(1, left));
                frame = joiner.feed(bytes(part.payload()));
            }
            return new Incoming(frame, m.fds());
        } catch (RuntimeException e) {
            m.fds().forEach(Fd::close);
            throw e;
        }
    }

    private static byte[] bytes(ByteBuffer payload) {
        if (payload.hasArray() && payload.arrayOffset() == 0 && payload.position() == 0
                && payload.remaining() == payload.array().length) {
            return payload.array();
        }
        byte[] b = new byte[payload.remaining()];
        payload.duplicate().get(b);
        return b;
    }

    @Override
    public void close() {
        connection.close();
    }
}
