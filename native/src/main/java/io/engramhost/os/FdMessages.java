package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;
import static io.engramhost.os.internal.LibCHolder.RUNTIME;

import io.engramhost.os.internal.LibCHolder;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * Messages with any number of file descriptors over a connected SOCK_STREAM Unix socket.
 *
 * <pre>
 *   header   u32 LE payload length | u32 LE fd count      (the first batch of fds rides on it)
 *   payload  payload length bytes
 *   fillers  one byte 0xFD for each further batch of fds (at most 253 per sendmsg)
 * </pre>
 *
 * The receiver checks MSG_CTRUNC, short reads, and that exactly the announced number of fds
 * arrived. Received fds are CLOEXEC ({@code MSG_CMSG_CLOEXEC}) and returned owned.
 */
public final class FdMessages {
    /** The kernel's SCM_MAX_FD: most fds one sendmsg may carry. */
    public static final int MAX_FDS_PER_SENDMSG = 253;
    public static final int HEADER_BYTES = 8;
    public static final byte FILLER = (byte) 0xFD;

    private static final int SOL_SOCKET = 1;
    private static final int SCM_RIGHTS = 1;
    private static final int MSG_CTRUNC = 0x8;
    private static final int MSG_NOSIGNAL = 0x4000;
    private static final int MSG_DONTWAIT = 0x40;
    private static final int MSG_CMSG_CLOEXEC = 0x40000000;
    private static final int MSGHDR_BYTES = 56;
    private static final int IOVEC_BYTES = 16;
    private static final int CMSG_HEADER = 16;
    private static final int CONTROL_BYTES = CMSG_HEADER + align8(4 * MAX_FDS_PER_SENDMSG);
    private static final int IOV_AT = MSGHDR_BYTES;
    private static final int CONTROL_AT = IOV_AT + IOVEC_BYTES;
    /** Bytes a scratch buffer holds before its data: msghdr, iovec and one batch of control data. */
    static final int SCRATCH_HEADER_BYTES = CONTROL_AT + CONTROL_BYTES;

    private FdMessages() {
    }

    private static int align8(int n) {
        return (n + 7) & ~7;
    }

    /** A received message: its payload and the fds that came with it, now owned by the caller. */
    public record Received(ByteBuffer payload, List<Fd> fds) {
    }

    /**
     * One piece of a message as it is written: bytes, and the fds (raw numbers, owned elsewhere) that ride on its
     * first byte. A message is laid out once ({@link #layout}) and written by the blocking {@link #send} and by a
     * poll loop's non-blocking writes alike.
     */
    public record Segment(byte[] array, int offset, int length, int[] fds) {
        private static final int[] NO_FDS = new int[0];

        /** Bytes without fds. */
        public static Segment of(byte[] array, int offset, int length) {
            return new Segment(array, offset, length, NO_FDS);
        }
    }

    /** A message header as read: the payload length and the fd count, both unsigned. */
    public record Header(long payloadLength, long fdCount) {
        /** Decodes the {@value #HEADER_BYTES} bytes at {@code b[off..]}. */
        public static Header of(byte[] b, int off) {
            ByteBuffer h = ByteBuffer.wrap(b, off, HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
            return new Header(Integer.toUnsignedLong(h.getInt()), Integer.toUnsignedLong(h.getInt()));
        }
    }

    /**
     * The segments of one message: the header with the first batch of fds, the payload's pieces (not copied), and a
     * {@link #FILLER} byte for each further batch of at most {@value #MAX_FDS_PER_SENDMSG} fds.
     */
    public static List<Segment> layout(List<Segment> payload, int[] fds) {
        long length = 0;
        for (Segment s : payload) {
            length += s.length();
        }
        if (length > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("a message of " + length + " payload bytes; at most 2^31-1");
        }
        List<int[]> batches = batches(fds);
        List<Segment> out = new ArrayList<>(payload.size() + batches.size() + 1);
        byte[] header = ByteBuffer.allocate(HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN).putInt((int) length)
                .putInt(fds.length).array();
        out.add(new Segment(header, 0, HEADER_BYTES, batches.isEmpty() ? Segment.NO_FDS : batches.get(0)));
        for (Segment s : payload) {
            if (s.length() > 0) {
                out.add(s);
            }
        }
        for (int b = 1; b < batches.size(); b++) {
            out.add(new Segment(new byte[] {FILLER}, 0, 1, batches.get(b)));
        }
        return out;
    }

    /** {@code fds} in batches of at most {@value #MAX_FDS_PER_SENDMSG}, the most one sendmsg may carry. */
    public static List<int[]> batches(int[] fds) {
        List<int[]> out = new ArrayList<>();
        for (int at = 0; at < fds.length; at += MAX_FDS_PER_SENDMSG) {
            out.add(Arrays.copyOfRange(fds, at, Math.min(fds.length, at + MAX_FDS_PER_SENDMSG)));
        }
        return out;
    }

    /** The raw numbers of {@code fds}, in order. */
    public static int[] raw(List<? extends FdRef> fds) {
        int[] raw = new int[fds.size()];
        for (int i = 0; i < raw.length; i++) {
            raw[i] = fds.get(i).get();
        }
        return raw;
    }

    /** Sends {@code payload} with {@code fds} (not closed: the caller keeps owning them), blocking until it is written. */
    public static void send(int socket, String peer, ByteBuffer payload, List<? extends FdRef> fds) {
        byte[] body = new byte[payload.remaining()];
        payload.duplicate().get(body);
        List<Segment> segments = layout(List.of(Segment.of(body, 0, body.length)), raw(fds));
        // Each run of segments up to the next that carries fds goes in one copy, so a small message is one sendmsg.
        int from = 0;
        while (from < segments.size()) {
            int to = from + 1;
            int bytes = segments.get(from).length();
            while (to < segments.size() && segments.get(to).fds().length == 0) {
                bytes += segments.get(to).length();
                to++;
            }
            byte[] data = new byte[bytes];
            int at = 0;
            for (int i = from; i < to; i++) {
                Segment s = segments.get(i);
                System.arraycopy(s.array(), s.offset(), data, at, s.length());
                at += s.length();
            }
            sendAll(socket, peer, data, segments.get(from).fds());
            from = to;
        }
    }

    /** Writes all of {@code data}; {@code batch} (at most 253 fds) rides on the first sendmsg. */
    private static void sendAll(int socket, String peer, byte[] data, int[] batch) {
        Pointer buf = Memory.allocateDirect(RUNTIME, SCRATCH_HEADER_BYTES + data.length, true);
        int sent = 0;
        while (sent < data.length) {
            long n = sendOnce(socket, buf, data, sent, data.length - sent, batch, MSG_NOSIGNAL);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                if (errno == Errno.EPIPE || errno == Errno.ECONNRESET) {
                    throw new PeerClosedException("sendmsg(" + peer + ") failed: " + Errno.describe(errno));
                }
                throw new NativeException("sendmsg(" + peer + ", fds=" + batch.length + ")", errno);
            }
            sent += (int) n;
            batch = Segment.NO_FDS;
        }
    }

    /**
     * One sendmsg of {@code src[off, off+len)} copied into {@code buf} (laid out as a scratch
     * buffer), with {@code fds} (at most 253, may be empty) as SCM_RIGHTS. Returns sendmsg's result;
     * errno is left for the caller.
     */
    static long sendOnce(int socket, Pointer buf, byte[] src, int off, int len, int[] fds, int flags) {
        prepare(buf, src, off, len, fds);
        return LIBC.sendmsg(socket, buf, flags);
    }

    /**
     * One datagram: {@code data} with {@code fds} (at most 253, the caller keeps owning them) sent on the unbound
     * SOCK_DGRAM {@code socket} to the address {@code name} ({@code nameLength} bytes of a sockaddr), without waiting
     * (MSG_DONTWAIT). A datagram goes whole or not at all; EINTR is retried. False when the receiver's queue is full
     * (EAGAIN): nothing was sent.
     */
    static boolean sendDatagram(int socket, Pointer name, int nameLength, byte[] data, int[] fds, String peer) {
        Pointer buf = Memory.allocateDirect(RUNTIME, SCRATCH_HEADER_BYTES + Math.max(1, data.length), true);
        prepare(buf, data, 0, data.length, fds);
        buf.putAddress(0, name.address());
        buf.putInt(8, nameLength);
        while (LIBC.sendmsg(socket, buf, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            int errno = LibCHolder.errno();
            if (errno == Errno.EAGAIN) {
                return false;
            }
            if (errno != Errno.EINTR) {
                throw new NativeException("sendmsg(" + peer + ", " + data.length + " bytes, fds=" + fds.length + ")",
                        errno);
            }
        }
        return true;
    }

    /** Lays out {@code buf} (a scratch buffer) for one sendmsg of {@code src[off, off+len)} with {@code fds}. */
    private static void prepare(Pointer buf, byte[] src, int off, int len, int[] fds) {
        if (fds.length > MAX_FDS_PER_SENDMSG) {
            throw new IllegalArgumentException(fds.length + " fds in one sendmsg; at most " + MAX_FDS_PER_SENDMSG);
        }
        buf.put(SCRATCH_HEADER_BYTES, src, off, len);
        if (fds.length > 0) {
            int cmsgLen = CMSG_HEADER + 4 * fds.length;
            buf.putLong(CONTROL_AT, cmsgLen);
            buf.putInt(CONTROL_AT + 8, SOL_SOCKET);
            buf.putInt(CONTROL_AT + 12, SCM_RIGHTS);
            for (int i = 0; i < fds.length; i++) {
                buf.putInt(CONTROL_AT + CMSG_HEADER + 4L * i, fds[i]);
            }
            fillMsghdr(buf, align8(cmsgLen), len);
        } else {
            fillMsghdr(buf, 0, len);
        }
    }

    /** One recvmsg of at most {@code len} bytes into {@code buf}'s data area, with room for one batch of fds. */
    static long recvOnce(int socket, Pointer buf, int len, int flags) {
        fillMsghdr(buf, CONTROL_BYTES, len);
        return LIBC.recvmsg(socket, buf, flags);
    }

    private static void fillMsghdr(Pointer buf, long controlLen, int dataLen) {
        buf.putLong(0, 0L);
        buf.putInt(8, 0);
        buf.putAddress(16, buf.address() + IOV_AT);
        buf.putLong(24, 1L);
        buf.putAddress(32, controlLen == 0 ? 0L : buf.address() + CONTROL_AT);
        buf.putLong(40, controlLen);
        buf.putInt(48, 0);
        buf.putAddress(IOV_AT, buf.address() + SCRATCH_HEADER_BYTES);
        buf.putLong(IOV_AT + 8, dataLen);
    }

    static int msgFlags(Pointer buf) {
        return buf.getInt(48);
    }

    static void copyData(Pointer buf, byte[] dst, int off, int n) {
        buf.get(SCRATCH_HEADER_BYTES, dst, off, n);
    }

    /**
     * Receives one message. {@code timeoutMillis} bounds the whole message (-1: no bound). A message
     * larger than {@code maxPayload} or with more than {@code maxFds} fds is rejected, its fds closed.
     *
     * @throws PeerClosedException when the peer closed before or during the message
     * @throws ReceiveTimeoutException when the message did not arrive in time
     */
    public static Received receive(int socket, String peer, int maxPayload, int maxFds, int timeoutMillis) {
        long deadline = timeoutMillis < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutMillis * 1_000_000L;
        List<Fd> fds = new ArrayList<>();
        try {
            byte[] header = new byte[HEADER_BYTES];
            readFully(socket, peer, header, HEADER_BYTES, fds, deadline, true);
            Header h = Header.of(header, 0);
            long length = h.payloadLength();
            long fdCount = h.fdCount();
            // The first batch rides on the header's first byte: fewer than announced is refused at once, not waited for.
            if (fdCount <= maxFds && fds.size() != Math.min(fdCount, MAX_FDS_PER_SENDMSG)) {
                throw new IllegalArgumentException("message from " + peer + " announces " + fdCount + " fds, but "
                        + fds.size() + " came with its header (" + Math.min(fdCount, MAX_FDS_PER_SENDMSG)
                        + " must)");
            }
            if (length > maxPayload) {
                throw new IllegalArgumentException("message from " + peer + " announces " + length
                        + " payload bytes; at most " + maxPayload + " are accepted");
            }
            if (fdCount > maxFds) {
                throw new IllegalArgumentException("message from " + peer + " announces " + fdCount
                        + " fds; at most " + maxFds + " are accepted");
            }
            byte[] payload = new byte[(int) length];
            readFully(socket, peer, payload, payload.length, fds, deadline, false);
            byte[] filler = new byte[1];
            while (fds.size() < fdCount) {
                int before = fds.size();
                readFully(socket, peer, filler, 1, fds, deadline, false);
                if (filler[0] != FILLER || fds.size() - before != Math.min(MAX_FDS_PER_SENDMSG, fdCount - before)) {
                    throw new IllegalArgumentException("message from " + peer + ": expected a batch of fds ("
                            + fds.size() + " of " + fdCount + " received), got byte 0x"
                            + Integer.toHexString(filler[0] & 0xff) + " with " + (fds.size() - before) + " fds");
                }
            }
            if (fds.size() != fdCount) {
                throw new IllegalArgumentException("message from " + peer + " announced " + fdCount
                        + " fds but carried " + fds.size());
            }
            return new Received(ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN), List.copyOf(fds));
        } catch (RuntimeException e) {
            for (Fd fd : fds) {
                fd.close();
            }
            throw e;
        }
    }

    private static void readFully(int socket, String peer, byte[] dst, int length, List<Fd> fds, long deadline,
            boolean atMessageStart) {
        if (length == 0) {
            return;
        }
        Pointer buf = Memory.allocateDirect(RUNTIME, SCRATCH_HEADER_BYTES + length, true);
        int got = 0;
        while (got < length) {
            awaitReadable(socket, peer, deadline, got, length);
            long n = recvOnce(socket, buf, length - got, MSG_CMSG_CLOEXEC);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR || errno == Errno.EAGAIN) {
                    continue;
                }
                if (errno == Errno.ECONNRESET) {
                    throw new PeerClosedException("connection to " + peer + " was reset");
                }
                throw new NativeException("recvmsg(" + peer + ")", errno);
            }
            collectFds(buf, peer, fds);
            if ((msgFlags(buf) & MSG_CTRUNC) != 0) {
                throw new IllegalStateException("recvmsg(" + peer + "): control data truncated (MSG_CTRUNC):"
                        + " fds were lost; is RLIMIT_NOFILE exhausted?");
            }
            if (n == 0) {
                throw new PeerClosedException(atMessageStart && got == 0
                        ? "connection closed by " + peer
                        : "connection closed by " + peer + " mid-message after " + got + " of " + length + " bytes");
            }
            copyData(buf, dst, got, (int) n);
            got += (int) n;
        }
    }

    /** Adopts the SCM_RIGHTS fds of the last recvmsg into {@code buf}. */
    static void collectFds(Pointer buf, String peer, List<Fd> fds) {
        long control = CONTROL_AT;
        long controlLen = buf.getLong(40);
        long at = 0;
        while (at + CMSG_HEADER <= controlLen) {
            long len = buf.getLong(control + at);
            int level = buf.getInt(control + at + 8);
            int type = buf.getInt(control + at + 12);
            if (len < CMSG_HEADER) {
                break;
            }
            if (level == SOL_SOCKET && type == SCM_RIGHTS) {
                int n = (int) ((len - CMSG_HEADER) / 4);
                for (int i = 0; i < n; i++) {
                    fds.add(Fd.adopt(buf.getInt(control + at + CMSG_HEADER + 4L * i), "fd from " + peer));
                }
            }
            at += align8((int) len);
        }
    }

    private static void awaitReadable(int socket, String peer, long deadline, int got, int length) {
        if (deadline == Long.MAX_VALUE) {
            return;
        }
        Pointer pfd = Memory.allocateDirect(RUNTIME, 8, true);
        while (true) {
            long leftNanos = deadline - System.nanoTime();
            if (leftNanos <= 0) {
                throw new ReceiveTimeoutException("timed out waiting for " + peer
                        + (got == 0 ? "" : " (" + got + " of " + length + " bytes received)"));
            }
            pfd.putInt(0, socket);
            pfd.putShort(4, Posix.POLLIN);
            pfd.putShort(6, (short) 0);
            int n = LIBC.poll(pfd, 1, (int) Math.min(Integer.MAX_VALUE, (leftNanos + 999_999) / 1_000_000));
            if (n > 0) {
                return;
            }
            if (n < 0 && LibCHolder.errno() != Errno.EINTR) {
                throw new NativeException("poll(" + peer + ")", LibCHolder.errno());
            }
        }
    }
}
