package io.engramhost.daemon.loop;

import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.NonBlocking;
import io.engramhost.os.PeerClosedException;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.ProtocolException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.LongSupplier;

/**
 * One peer's next message, put together from whatever each non-blocking read brings. The 8-byte
 * header is checked against the connection's limit before any payload byte is read. A small message's buffer
 * grows only as bytes arrive, each growth drawn from the small pool of the daemon's {@link RequestMemory}; a large
 * one waits its turn for a reservation of its whole announced size, then gets a buffer of that size at once.
 * A client sends no fds: any that arrive are closed and the message refused.
 */
final class Inbound {
    /** The first payload buffer, and the step it grows by at first (doubling after). */
    private static final int FIRST_CHUNK = 16 << 10;

    /** What a read did. */
    enum Progress { COMPLETE, WAITING, NO_MEMORY }

    private final byte[] header = new byte[FdMessages.HEADER_BYTES];
    private int headerGot;
    private byte[] payload;
    private int payloadLength = -1;
    private int payloadGot;
    private long reserved;
    private long startedNanos;

    /** True when no byte of a message has arrived. */
    boolean idle() {
        return headerGot == 0;
    }

    long startedNanos() {
        return startedNanos;
    }

    /** Bytes of request memory this message holds. */
    long reserved() {
        return reserved;
    }

    /** The payload bytes the message's header announced (-1 before the header is in). */
    long announced() {
        return payloadLength;
    }

    /** Whether the message is large: it reserves its announced size from the large pool ({@link RequestMemory}). */
    boolean large() {
        return payloadLength > RequestMemory.SMALL_MESSAGE;
    }

    /** The large pool reserved {@code size} bytes for this message: its buffer, of the whole announced size. */
    void granted(long size) {
        reserved = size;
        payload = new byte[(int) size];
    }

    /**
     * Reads what the socket has, up to the end of the message.
     *
     * @param maxPayload the most payload bytes this connection may announce now
     * @param frameCheck looks at the frame header (the payload's first 8 bytes) as soon as it is in
     * @param clock      when the message's first byte arrived (for its deadline)
     * @throws PeerClosedException at end of stream (mid-message or not)
     * @throws ProtocolException when the message breaks a limit (the caller answers BAD_REQUEST)
     */
    Progress read(Connection owner, NonBlocking.Scratch scratch, int maxPayload, FrameCheck frameCheck,
            RequestMemory memory, LongSupplier clock) {
        int fd = owner.fd.get();
        List<Fd> stray = new ArrayList<>(0);
        try {
            while (true) {
                int n;
                if (headerGot < header.length) {
                    n = NonBlocking.recv(fd, scratch, header, headerGot, header.length - headerGot, stray);
                    if (n > 0) {
                        refuseFds(stray);
                        if (headerGot == 0) {
                            startedNanos = clock.getAsLong();
                        }
                        headerGot += n;
                        if (headerGot == header.length) {
                            parseHeader(maxPayload);
                        }
                    }
                } else {
                    if (payloadLength == payloadGot) {
                        return Progress.COMPLETE;
                    }
                    if (large() ? !memory.admitLarge(owner, payloadLength)
                            : payloadGot == payload.length && !grow(owner, memory)) {
                        return Progress.NO_MEMORY;
                    }
                    n = NonBlocking.recv(fd, scratch, payload, payloadGot, payload.length - payloadGot, stray);
                    if (n > 0) {
                        refuseFds(stray);
                        int before = payloadGot;
                        payloadGot += n;
                        if (before < ProtocolDescriptor.HEADER_BYTES && payloadGot >= ProtocolDescriptor.HEADER_BYTES) {
                            frameCheck.check(payload, payloadLength);
                        }
                    }
                }
                if (n == NonBlocking.WOULD_BLOCK) {
                    return Progress.WAITING;
                }
                if (n == 0) {
                    throw new PeerClosedException(idle() ? "closed" : "closed mid-message");
                }
                if (headerGot == header.length && payloadLength == payloadGot) {
                    return Progress.COMPLETE;
                }
            }
        } finally {
            stray.forEach(Fd::close);
        }
    }

    private static void refuseFds(List<Fd> stray) {
        if (!stray.isEmpty()) {
            throw new ProtocolException(stray.size() + " fds arrived with a client message; a client sends none");
        }
    }

    private void parseHeader(int maxPayload) {
        FdMessages.Header h = FdMessages.Header.of(header, 0);
        long length = h.payloadLength();
        long fdCount = h.fdCount();
        if (fdCount != 0) {
            throw new ProtocolException("message announces " + fdCount + " fds; a client sends none");
        }
        if (length > maxPayload) {
            throw new ProtocolException("message announces " + length + " payload bytes; at most " + maxPayload
                    + " are accepted here");
        }
        if (length < ProtocolDescriptor.HEADER_BYTES) {
            throw new ProtocolException("message of " + length + " payload bytes is shorter than a frame header");
        }
        payloadLength = (int) length;
        payload = new byte[0];
    }

    private boolean grow(Connection owner, RequestMemory memory) {
        int next = payload.length == 0 ? Math.min(payloadLength, FIRST_CHUNK)
                : (int) Math.min(payloadLength, Math.max(FIRST_CHUNK, 2L * payload.length));
        long delta = next - payload.length;
        if (!memory.takeSmall(owner, delta)) {
            return false;
        }
        reserved += delta;
        payload = Arrays.copyOf(payload, next);
        return true;
    }

    /** Hands the complete payload over and gets ready for the next message; the reservation stays with the caller. */
    byte[] take() {
        byte[] p = payload;
        headerGot = 0;
        payload = null;
        payloadLength = -1;
        payloadGot = 0;
        reserved = 0;
        startedNanos = 0;
        return p;
    }

    /** Gives back what a dropped message held, and its place in line. */
    void release(RequestMemory memory, Connection owner) {
        memory.forget(owner);
        long held = reserved;
        boolean wasLarge = large();
        reserved = 0;
        payload = null;
        if (held > 0) {
            memory.give(held, wasLarge);
        }
    }

    /** A check of a frame's header the moment it arrives (limits that depend on the type). */
    interface FrameCheck {
        void check(byte[] payloadSoFar, int payloadLength);
    }
}
