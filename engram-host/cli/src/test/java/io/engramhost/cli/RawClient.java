package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameReader;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeoutException;

/**
 * A client that speaks raw bytes, written from docs/protocol.md alone: it frames messages itself
 * (u32 payload_length, u32 fd_count, payload), reads the daemon's messages whole, joins version-2
 * parts by hand and bounds every wait. It cannot receive fds (see FdClient for those).
 */
final class RawClient implements AutoCloseable {
    static final int MAGIC = 0x4D524745;
    static final int CONTINUED = 0x8000;
    static final int PART = 11;

    private final SocketChannel ch;
    private final Selector selector;

    private RawClient(SocketChannel ch) throws IOException {
        this.ch = ch;
        ch.configureBlocking(false);
        this.selector = Selector.open();
    }

    static RawClient connect(Path socket) throws IOException {
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        ch.connect(UnixDomainSocketAddress.of(socket));
        return new RawClient(ch);
    }

    // ------------------------------------------------------------------------------------ frames

    /** A frame's bytes: the 8-byte frame header, then the body. */
    static final class Frame {
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();

        Frame(int type, int version) {
            i32(MAGIC).u16(version).u16(type);
        }

        Frame u8(int v) {
            out.write(v);
            return this;
        }

        Frame u16(int v) {
            return u8(v & 0xff).u8((v >>> 8) & 0xff);
        }

        Frame i32(int v) {
            return u16(v & 0xffff).u16(v >>> 16);
        }

        Frame raw(byte[] b) {
            out.writeBytes(b);
            return this;
        }

        Frame str16(byte[] b) {
            return u16(b.length).raw(b);
        }

        Frame str16(String s) {
            return str16(s.getBytes(StandardCharsets.UTF_8));
        }

        Frame blob32(byte[] b) {
            return i32(b.length).raw(b);
        }

        byte[] bytes() {
            return out.toByteArray();
        }
    }

    static byte[] hello(int min, int max, String name) {
        return new Frame(1, 1).u16(min).u16(max).i32((int) ProcessHandle.current().pid()).str16(name).bytes();
    }

    static byte[] importAny(int version) {
        return new Frame(3, version).i32(0).i32(-1).u8(0).bytes();
    }

    static byte[] empty(int type, int version) {
        return new Frame(type, version).bytes();
    }

    /** The message header: u32 payload_length, u32 fd_count. */
    static byte[] header(long payloadLength, long fdCount) {
        return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putInt((int) payloadLength).putInt((int) fdCount)
                .array();
    }

    static byte[] message(byte[] frame) {
        byte[] m = new byte[8 + frame.length];
        System.arraycopy(header(frame.length, 0), 0, m, 0, 8);
        System.arraycopy(frame, 0, m, 8, frame.length);
        return m;
    }

    // ------------------------------------------------------------------------------------ writing

    /** Writes {@code b} whole (waiting at most 5 s for room). */
    RawClient write(byte[] b) throws IOException {
        ByteBuffer bb = ByteBuffer.wrap(b);
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (bb.hasRemaining()) {
            if (ch.write(bb) == 0) {
                if (System.nanoTime() > deadline) {
                    throw new IOException("the daemon took no bytes for 5 s");
                }
                await(SelectionKey.OP_WRITE, 50);
            }
        }
        return this;
    }

    /** Sends one message carrying {@code frame} and no fds. */
    RawClient send(byte[] frame) throws IOException {
        return write(message(frame));
    }

    /** HELLO with {@code min..max}; returns the WELCOME (or fails with what came instead). */
    Message handshake(int min, int max) throws Exception {
        send(hello(min, max, "conformance"));
        Message m = next(5000);
        assertEquals(2, m.type(), "WELCOME expected, got " + m);
        return m;
    }

    // ------------------------------------------------------------------------------------ reading

    /** One message as it came: its header's fields and its payload (a frame, or a piece of one). */
    record Message(long payloadLength, long fdCount, byte[] payload) {
        int magic() {
            return ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN).getInt(0);
        }

        int version() {
            return ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN).getShort(4) & 0xffff;
        }

        int rawType() {
            return ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN).getShort(6) & 0xffff;
        }

        int type() {
            return rawType() & ~CONTINUED;
        }

        boolean continued() {
            return (rawType() & CONTINUED) != 0;
        }

        FrameReader reader() {
            return FrameReader.of(payload);
        }

        ErrorReply error() {
            assertEquals(9, type(), "an ERROR expected, got " + this);
            return ErrorReply.decode(reader());
        }

        @Override
        public String toString() {
            String s = "message of " + payloadLength + " bytes, " + fdCount + " fds, type " + rawType() + " v" + version();
            if (type() == 9 && !continued()) {
                ErrorReply e = ErrorReply.decode(reader());
                s += ": " + e.codeName() + " " + e.message();
            }
            return s;
        }
    }

    private void await(int ops, long millis) throws IOException {
        SelectionKey key = ch.register(selector, ops);
        try {
            selector.select(Math.max(1, millis));
            selector.selectedKeys().clear();
        } finally {
            key.cancel();
            selector.selectNow();
        }
    }

    /** Reads exactly {@code n} bytes by {@code deadline}; EOFException at end of stream, TimeoutException late. */
    private byte[] readFully(int n, long deadline, boolean atStart) throws IOException, TimeoutException {
        ByteBuffer b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) {
            int r;
            try {
                r = ch.read(b);
            } catch (IOException e) {
                if (String.valueOf(e.getMessage()).contains("reset")) {
                    throw new EOFException("connection reset after " + b.position() + " of " + n + " bytes");
                }
                throw e;
            }
            if (r < 0) {
                throw new EOFException(atStart && b.position() == 0 ? "closed"
                        : "closed after " + b.position() + " of " + n + " bytes");
            }
            if (r == 0) {
                long left = (deadline - System.nanoTime()) / 1_000_000;
                if (left <= 0) {
                    throw new TimeoutException("no bytes (" + b.position() + " of " + n + ")");
                }
                await(SelectionKey.OP_READ, Math.min(left, 100));
            }
        }
        return b.array();
    }

    /** The next message (no fds can come with it here), within {@code timeoutMillis}. */
    Message next(int timeoutMillis) throws IOException, TimeoutException {
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000L;
        byte[] h = readFully(8, deadline, true);
        ByteBuffer hb = ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN);
        long length = Integer.toUnsignedLong(hb.getInt(0));
        long fds = Integer.toUnsignedLong(hb.getInt(4));
        if (length > 64L << 20) {
            throw new IOException("a message announcing " + length + " bytes");
        }
        byte[] payload = readFully((int) length, deadline, false);
        // fds beyond the first 253 ride on one-byte 0xFD fillers after the payload (this client drops the fds).
        long fillers = (Math.max(fds - 253, 0) + 252) / 253;
        for (long i = 0; i < fillers; i++) {
            byte f = readFully(1, deadline, false)[0];
            if (f != (byte) 0xFD) {
                throw new IOException("filler " + i + " of " + fillers + " is 0x" + Integer.toHexString(f & 0xff));
            }
        }
        return new Message(length, fds, payload);
    }

    /**
     * The next logical frame: a message, or, for a continued one, its pieces joined by hand
     * (docs/protocol.md, "Parts"). Every message of a frame is checked as the document says.
     */
    Joined nextFrame(int timeoutMillis) throws IOException, TimeoutException {
        Message first = next(timeoutMillis);
        java.util.List<Message> messages = new java.util.ArrayList<>();
        messages.add(first);
        if (!first.continued()) {
            return new Joined(first.payload(), messages);
        }
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        byte[] h = java.util.Arrays.copyOf(first.payload(), 8);
        ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) first.type());
        body.writeBytes(h);
        body.write(first.payload(), 8, first.payload().length - 8);
        Message m = first;
        while (m.continued()) {
            m = next(timeoutMillis);
            messages.add(m);
            assertEquals(PART, m.type(), "a PART follows a continued frame: " + m);
            assertEquals(first.version(), m.version(), "a PART carries the frame's version");
            assertEquals(0, m.fdCount(), "parts carry no fds");
            body.write(m.payload(), 8, m.payload().length - 8);
        }
        return new Joined(body.toByteArray(), messages);
    }

    /** A logical frame and the messages that carried it. */
    record Joined(byte[] frame, java.util.List<Message> messages) {
        int type() {
            return ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN).getShort(6) & 0xffff;
        }

        FrameReader reader() {
            return FrameReader.of(frame);
        }
    }

    /**
     * Asserts that the daemon closes the connection within {@code timeoutMillis} with nothing more
     * to read (the document's "closes" / "answers nothing").
     */
    void assertClosedWithNothingMore(int timeoutMillis) throws IOException {
        try {
            Message m = next(timeoutMillis);
            throw new AssertionError("expected the daemon to close without an answer, got " + m);
        } catch (EOFException e) {
            // EOF, or a reset when the daemon closed with bytes of ours unread: closed either way, between messages.
            assertTrue(e.getMessage().equals("closed") || e.getMessage().equals("connection reset after 0 of 8 bytes"),
                    "closed between messages: " + e.getMessage());
        } catch (TimeoutException e) {
            throw new AssertionError("the connection is still open after " + timeoutMillis + " ms");
        }
    }

    /** Asserts the next message is one ERROR of {@code code}, encoded as {@code version}, naming each of {@code names}. */
    ErrorReply assertError(int timeoutMillis, ErrorCode code, int version, String... names) throws Exception {
        Message m = next(timeoutMillis);
        assertEquals(9, m.type(), "ERROR " + code + " expected, got " + m);
        assertEquals(version, m.version(), "ERROR encoded as version " + version + ": " + m);
        assertEquals(0, m.fdCount());
        ErrorReply e = m.error();
        assertEquals(code, e.code(), "code of " + m);
        assertEquals(code == ErrorCode.NOT_READY || code == ErrorCode.BUSY, e.retryable(), "retryable of " + m);
        for (String n : names) {
            assertTrue(e.message().contains(n), "the message names '" + n + "': " + e.message());
        }
        return e;
    }

    /** ERROR {@code code}, then the connection closed (every code but NOT_READY, FINGERPRINT_MISMATCH, a refused STOP). */
    ErrorReply assertErrorThenClosed(int timeoutMillis, ErrorCode code, int version, String... names) throws Exception {
        ErrorReply e = assertError(timeoutMillis, code, version, names);
        assertClosedWithNothingMore(2000);
        return e;
    }

    boolean isOpen() {
        return ch.isOpen();
    }

    @Override
    public void close() {
        try {
            selector.close();
            ch.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
