package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;
import static io.engramhost.os.internal.LibCHolder.RUNTIME;

import io.engramhost.os.internal.LibCHolder;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
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
    private static final int MSG_CMSG_CLOEXEC = 0x40000000;
    private static final int MSGHDR_BYTES = 56;
    private static final int IOVEC_BYTES = 16;
    private static final int CMSG_HEADER = 16;
    private static final int CONTROL_BYTES = CMSG_HEADER + align8(4 * MAX_FDS_PER_SENDMSG);

    private FdMessages() {
    }

    private static int align8(int n) {
        return (n + 7) & ~7;
    }

    /** A received message: its payload and the fds that came with it, now owned by the caller. */
    public record Received(ByteBuffer payload, List<Fd> fds) {
    }

    /** Sends {@code payload} with {@code fds} (not closed: the caller keeps owning them). */
    public static void send(int socket, String peer, ByteBuffer payload, List<Fd> fds) {
        int length = payload.remaining();
        int[] raw = new int[fds.size()];
        for (int i = 0; i < raw.length; i++) {
            raw[i] = fds.get(i).get();
        }
        byte[] message = new byte[HEADER_BYTES + length];
        ByteBuffer b = ByteBuffer.wrap(message).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(length).putInt(raw.length).put(payload.duplicate());
        int first = Math.min(raw.length, MAX_FDS_PER_SENDMSG);
        sendAll(socket, peer, message, raw, 0, first);
        for (int at = first; at < raw.length; at += MAX_FDS_PER_SENDMSG) {
            sendAll(socket, peer, new byte[] {FILLER}, raw, at, Math.min(MAX_FDS_PER_SENDMSG, raw.length - at));
        }
    }

    /** Writes all of {@code data}; fds[from, from+count) ride on the first sendmsg. */
    private static void sendAll(int socket, String peer, byte[] data, int[] fds, int from, int count) {
        Pointer buf = Memory.allocateDirect(RUNTIME, MSGHDR_BYTES + IOVEC_BYTES + CONTROL_BYTES + data.length, true);
        long msg = 0;
        long iov = MSGHDR_BYTES;
        long control = iov + IOVEC_BYTES;
        long dataAt = control + CONTROL_BYTES;
        buf.put(dataAt, data, 0, data.length);
        int sent = 0;
        boolean withFds = count > 0;
        while (sent < data.length) {
            buf.putLong(msg + 0, 0L);
            buf.putInt(msg + 8, 0);
            buf.putAddress(msg + 16, buf.address() + iov);
            buf.putLong(msg + 24, 1L);
            if (withFds) {
                int len = CMSG_HEADER + 4 * count;
                buf.putLong(control, len);
                buf.putInt(control + 8, SOL_SOCKET);
                buf.putInt(control + 12, SCM_RIGHTS);
                for (int i = 0; i < count; i++) {
                    buf.putInt(control + CMSG_HEADER + 4L * i, fds[from + i]);
                }
                buf.putAddress(msg + 32, buf.address() + control);
                buf.putLong(msg + 40, align8(len));
            } else {
                buf.putAddress(msg + 32, 0L);
                buf.putLong(msg + 40, 0L);
            }
            buf.putInt(msg + 48, 0);
            buf.putAddress(iov, buf.address() + dataAt + sent);
            buf.putLong(iov + 8, data.length - sent);
            long n = LIBC.sendmsg(socket, buf.slice(msg), MSG_NOSIGNAL);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                if (errno == Errno.EPIPE || errno == Errno.ECONNRESET) {
                    throw new PeerClosedException("sendmsg(" + peer + ") failed: " + Errno.describe(errno));
                }
                throw new NativeException("sendmsg(" + peer + ", fds=" + (withFds ? count : 0) + ")", errno);
            }
            sent += (int) n;
            withFds = false;
        }
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
            ByteBuffer h = ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN);
            long length = Integer.toUnsignedLong(h.getInt());
            long fdCount = Integer.toUnsignedLong(h.getInt());
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
                if (filler[0] != FILLER || fds.size() == before) {
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
        Pointer buf = Memory.allocateDirect(RUNTIME, MSGHDR_BYTES + IOVEC_BYTES + CONTROL_BYTES + length, true);
        long iov = MSGHDR_BYTES;
        long control = iov + IOVEC_BYTES;
        long dataAt = control + CONTROL_BYTES;
        int got = 0;
        while (got < length) {
            awaitReadable(socket, peer, deadline, got, length);
            buf.putLong(0, 0L);
            buf.putInt(8, 0);
            buf.putAddress(16, buf.address() + iov);
            buf.putLong(24, 1L);
            buf.putAddress(32, buf.address() + control);
            buf.putLong(40, CONTROL_BYTES);
            buf.putInt(48, 0);
            buf.putAddress(iov, buf.address() + dataAt + got);
            buf.putLong(iov + 8, length - got);
            long n = LIBC.recvmsg(socket, buf, MSG_CMSG_CLOEXEC);
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
            collectFds(buf, control, peer, fds);
            if ((buf.getInt(48) & MSG_CTRUNC) != 0) {
                throw new IllegalStateException("recvmsg(" + peer + "): control data truncated (MSG_CTRUNC):"
                        + " fds were lost; is RLIMIT_NOFILE exhausted?");
            }
            if (n == 0) {
                throw new PeerClosedException(atMessageStart && got == 0
                        ? "connection closed by " + peer
                        : "connection closed by " + peer + " mid-message after " + got + " of " + length + " bytes");
            }
            got += (int) n;
        }
        buf.get(dataAt, dst, 0, length);
    }

    private static void collectFds(Pointer buf, long control, String peer, List<Fd> fds) {
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
