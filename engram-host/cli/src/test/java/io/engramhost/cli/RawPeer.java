package io.engramhost.cli;

import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.MessageType;
import java.io.EOFException;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;

/**
 * A peer that speaks raw bytes to a daemon over a JDK Unix socket channel (no fds): idle, trickling,
 * polling or malformed connections for the hardening tests. Blocking and one fd each, so a test can
 * hold thousands; it encodes with the project's codecs. {@link RawClient}, the conformance tests'
 * client, is the other kind on purpose: written from docs/protocol.md alone, with a selector per
 * connection and deadlines on every read.
 */
final class RawPeer implements AutoCloseable {
    final SocketChannel channel;

    private RawPeer(SocketChannel channel) {
        this.channel = channel;
    }

    static RawPeer connect(Path socket) throws IOException {
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        ch.connect(UnixDomainSocketAddress.of(socket));
        return new RawPeer(ch);
    }

    /** A message: the 8-byte header (payload length, no fds), then the frame. */
    static ByteBuffer message(ByteBuffer frame) {
        byte[] f = new byte[frame.remaining()];
        frame.duplicate().get(f);
        return ByteBuffer.wrap(RawClient.message(f));
    }

    void send(ByteBuffer bytes) throws IOException {
        ByteBuffer b = bytes.duplicate();
        while (b.hasRemaining()) {
            channel.write(b);
        }
    }

    void sendFrame(ByteBuffer frame) throws IOException {
        send(message(frame));
    }

    /** HELLO (versions 1-2), then the WELCOME's payload. */
    byte[] hello(String name) throws IOException {
        sendFrame(new Hello(1, 2, (int) ProcessHandle.current().pid(), name).encode());
        return readMessage();
    }

    /** One whole message's payload (no fds expected). */
    byte[] readMessage() throws IOException {
        ByteBuffer h = readFully(8).order(ByteOrder.LITTLE_ENDIAN);
        int length = h.getInt(0);
        if (length < 0 || length > (64 << 20)) {
            throw new IOException("bad payload length " + Integer.toUnsignedString(length));
        }
        return readFully(length).array();
    }

    private ByteBuffer readFully(int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) {
            if (channel.read(b) < 0) {
                throw new EOFException("daemon closed the connection after " + b.position() + " of " + n + " bytes");
            }
        }
        return b.flip();
    }

    /** The ERROR frame in {@code payload}, failing when it is another type. */
    static ErrorReply error(byte[] payload) {
        FrameReader r = FrameReader.of(payload);
        if (r.type() != MessageType.ERROR) {
            throw new AssertionError("expected ERROR, got " + r.type());
        }
        return ErrorReply.decode(r);
    }

    @Override
    public void close() throws IOException {
        channel.close();
    }
}
