package io.engramhost.seed;

import io.engramhost.os.RawMemory;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSocket;

/**
 * One authenticated connection to an exporting peer, as the requester sees it: connect, the handshake, MANIFEST,
 * then ranges read straight into the caller's memory. Every read has a deadline ({@link #IDLE_MILLIS} without a
 * byte), every frame's length is checked at its header against what was asked, and anything amiss is a
 * {@link PeerException} whose message names the peer; the connection is then useless and closed by its owner.
 *
 * <p>Without TLS the frames go over a non-blocking {@link SocketChannel}, a range read straight into the memory; with
 * TLS ({@link SeedTls}) over a JDK {@link SSLSocket}, TLS 1.3, whose decrypted bytes come in pieces of at most
 * {@link #TLS_PIECE} bytes that are copied into the memory.
 */
final class PeerConnection implements AutoCloseable {
    static final int CONNECT_MILLIS = 2000;
    static final int HANDSHAKE_MILLIS = 5000;
    /** Without a byte from the peer for this long, a read fails. */
    static final int IDLE_MILLIS = 10_000;
    /** Under TLS, bytes read from the socket at a time into a buffer of the connection, then copied into memory. */
    static final int TLS_PIECE = 256 << 10;

    /** What went wrong with a peer, in one line naming it. */
    static final class PeerException extends IOException {
        private static final long serialVersionUID = 1L;
        /** The peer is this daemon itself, or not ready: not its fault, not counted as a refusal. */
        final boolean benign;

        PeerException(String message, boolean benign) {
            super(message);
            this.benign = benign;
        }
    }

    /** Told of the bytes of a DATA range as they land: {@code n} bytes at {@code address}, in order. */
    @FunctionalInterface
    interface Landed {
        void landed(long address, int n);
    }

    /**
     * The most a read of a DATA range takes before its bytes go to {@link Landed}: small enough that the stream hashes
     * them while the cache still holds them, large enough that the reads cost nothing beside the copy.
     */
    static final int LAND_PIECE = 1 << 20;

    /** The bytes of one connection, both ways, with a deadline per read and write. */
    private interface Link {
        /** Fills {@code b}, within {@code millis} of each byte. */
        void read(ByteBuffer b, int millis) throws IOException;

        /**
         * Reads {@code length} bytes into native memory at {@code address}, telling {@code landed} of each piece as
         * it lands (in order, at most {@link #LAND_PIECE} bytes at a time), while the socket takes in the next.
         */
        void readInto(long address, int length, int millis, Landed landed) throws IOException;

        void write(ByteBuffer b, int millis) throws IOException;

        void close();
    }

    private final String peer;
    private final Link link;
    private final ByteBuffer header = ByteBuffer.allocate(SeedWire.HEADER).order(ByteOrder.LITTLE_ENDIAN);

    private PeerConnection(String peer, Link link) {
        this.peer = peer;
        this.link = link;
    }

    /** Connects to {@code address} and authenticates both ways with {@code key}; through TLS when {@code tls}. */
    static PeerConnection open(InetSocketAddress address, SeedKey key, byte[] ownId, SeedTls tls) throws IOException {
        String peer = SeedSettings.show(address);
        Link link = tls != null ? TlsLink.open(address, tls, peer) : PlainLink.open(address, peer);
        PeerConnection c = new PeerConnection(peer, link);
        try {
            c.handshake(key, ownId);
            return c;
        } catch (IOException | RuntimeException e) {
            c.close();
            if (e instanceof PeerException) {
                throw e;
            }
            throw new PeerException("peer " + peer + ": " + (e.getMessage() == null ? e.toString() : e.getMessage()),
                    false);
        }
    }

    /** A non-blocking channel waited on with a selector: ranges land in memory with no copy. */
    private static final class PlainLink implements Link {
        private final String peer;
        private final SocketChannel channel;
        private final Selector selector;

        private PlainLink(String peer, SocketChannel channel, Selector selector) {
            this.peer = peer;
            this.channel = channel;
            this.selector = selector;
        }

        static PlainLink open(InetSocketAddress address, String peer) throws IOException {
            SocketChannel ch = SocketChannel.open();
            Selector sel = null;
            try {
                ch.configureBlocking(false);
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                sel = Selector.open();
                if (!ch.connect(address)) {
                    ch.register(sel, SelectionKey.OP_CONNECT);
                    long deadline = System.nanoTime() + CONNECT_MILLIS * 1_000_000L;
                    while (!ch.finishConnect()) {
                        long left = (deadline - System.nanoTime()) / 1_000_000;
                        if (left <= 0) {
                            throw new PeerException("peer " + peer + " did not answer within " + CONNECT_MILLIS
                                    + " ms", false);
                        }
                        sel.select(left);
                        sel.selectedKeys().clear();
                    }
                    ch.keyFor(sel).cancel();
                    sel.selectNow();
                }
                return new PlainLink(peer, ch, sel);
            } catch (IOException | RuntimeException e) {
                ch.close();
                if (sel != null) {
                    sel.close();
                }
                if (e instanceof PeerException) {
                    throw e;
                }
                throw new PeerException("peer " + peer + ": " + (e.getMessage() == null ? e.toString()
                        : e.getMessage()), false);
            }
        }

        @Override
        public void read(ByteBuffer b, int millis) throws IOException {
            while (b.hasRemaining()) {
                int n = channel.read(b);
                if (n < 0) {
                    throw new PeerException("peer " + peer + " closed the connection", false);
                }
                if (n == 0) {
                    await(SelectionKey.OP_READ, millis);
                }
            }
        }

        @Override
        public void readInto(long address, int length, int millis, Landed landed) throws IOException {
            ByteBuffer b = RawMemory.buffer(address, length);
            for (int done = 0; done < length; ) {
                b.limit(Math.min(length, done + LAND_PIECE));
                int n = channel.read(b);
                if (n < 0) {
                    throw new PeerException("peer " + peer + " closed the connection", false);
                }
                if (n == 0) {
                    await(SelectionKey.OP_READ, millis);
                    continue;
                }
                landed.landed(address + done, n);
                done += n;
            }
        }

        @Override
        public void write(ByteBuffer b, int millis) throws IOException {
            while (b.hasRemaining()) {
                if (channel.write(b) == 0) {
                    await(SelectionKey.OP_WRITE, millis);
                }
            }
        }

        private void await(int op, int millis) throws IOException {
            SelectionKey k = channel.keyFor(selector);
            if (k == null) {
                k = channel.register(selector, op);
            } else {
                k.interestOps(op);
            }
            if (selector.select(millis) == 0) {
                throw new PeerException("peer " + peer + " sent nothing for " + millis + " ms", false);
            }
            selector.selectedKeys().clear();
        }

        @Override
        public void close() {
            try {
                channel.close();
            } catch (IOException ignored) {
                // closing a socket that failed
            }
            try {
                selector.close();
            } catch (IOException ignored) {
                // nothing to keep
            }
        }
    }

    /** A TLS 1.3 socket of the JDK; a read's deadline is the socket's timeout, set before each. */
    private static final class TlsLink implements Link {
        private final String peer;
        private final SSLSocket socket;
        private final InputStream in;
        private final OutputStream out;
        private final byte[] piece = new byte[TLS_PIECE];

        private TlsLink(String peer, SSLSocket socket) throws IOException {
            this.peer = peer;
            this.socket = socket;
            this.in = socket.getInputStream();
            this.out = socket.getOutputStream();
        }

        static TlsLink open(InetSocketAddress address, SeedTls tls, String peer) throws IOException {
            SSLSocket s = (SSLSocket) tls.context().getSocketFactory().createSocket();
            try {
                s.setTcpNoDelay(true);
                s.setSSLParameters(tls.clientParameters());
                try {
                    s.connect(address, CONNECT_MILLIS);
                } catch (SocketTimeoutException e) {
                    throw new PeerException("peer " + peer + " did not answer within " + CONNECT_MILLIS + " ms", false);
                }
                s.setSoTimeout(HANDSHAKE_MILLIS);
                try {
                    s.startHandshake();
                } catch (SocketTimeoutException e) {
                    throw new PeerException("peer " + peer + " did not finish the TLS handshake within "
                            + HANDSHAKE_MILLIS + " ms", false);
                } catch (SSLException e) {
                    throw new PeerException("peer " + peer + ": the TLS handshake failed (" + e.getMessage() + ")",
                            false);
                }
                return new TlsLink(peer, s);
            } catch (IOException | RuntimeException e) {
                s.close();
                throw e;
            }
        }

        /** Reads up to {@code n} bytes into {@code dst[off...]}: at least one. */
        private int some(byte[] dst, int off, int n, int millis) throws IOException {
            socket.setSoTimeout(millis);
            int got;
            try {
                got = in.read(dst, off, n);
            } catch (SocketTimeoutException e) {
                throw new PeerException("peer " + peer + " sent nothing for " + millis + " ms", false);
            }
            if (got < 0) {
                throw new PeerException("peer " + peer + " closed the connection", false);
            }
            return got;
        }

        @Override
        public void read(ByteBuffer b, int millis) throws IOException {
            while (b.hasRemaining()) {
                int n = some(piece, 0, Math.min(piece.length, b.remaining()), millis);
                b.put(piece, 0, n);
            }
        }

        @Override
        public void readInto(long address, int length, int millis, Landed landed) throws IOException {
            RawMemory.checkRange(address, length);
            for (int done = 0; done < length; ) {
                int n = some(piece, 0, Math.min(Math.min(piece.length, LAND_PIECE), length - done), millis);
                RawMemory.copy(piece, RawMemory.BYTE_ARRAY_BASE, null, address + done, n);
                landed.landed(address + done, n);
                done += n;
            }
        }

        @Override
        public void write(ByteBuffer b, int millis) throws IOException {
            socket.setSoTimeout(millis); // a write blocks on the socket's buffer; its deadline is the connection's idle
            byte[] bytes = new byte[b.remaining()];
            b.get(bytes);
            out.write(bytes);
            out.flush();
        }

        @Override
        public void close() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing a socket that failed
            }
        }
    }

    String peer() {
        return peer;
    }

    private void handshake(SeedKey key, byte[] ownId) throws IOException {
        byte[] nonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
        ByteBuffer hello = SeedWire.frame(SeedWire.HELLO, SeedWire.HELLO_BYTES);
        hello.putInt(SeedWire.MAGIC).putShort((short) SeedWire.VERSION).putShort((short) 0).put(nonce).put(ownId);
        write(hello.flip(), HANDSHAKE_MILLIS);
        ByteBuffer ch = expect(SeedWire.CHALLENGE, SeedWire.CHALLENGE_BYTES, SeedWire.CHALLENGE_BYTES, HANDSHAKE_MILLIS);
        int version = Short.toUnsignedInt(ch.getShort());
        ch.getShort();
        if (version != SeedWire.VERSION) {
            throw new PeerException("peer " + peer + " speaks seeding version " + version + ", this build "
                    + SeedWire.VERSION, false);
        }
        byte[] serverNonce = new byte[SeedAuth.NONCE_BYTES];
        byte[] serverId = new byte[SeedAuth.ID_BYTES];
        byte[] proof = new byte[SeedAuth.MAC_BYTES];
        ch.get(serverNonce).get(serverId).get(proof);
        if (Arrays.equals(serverId, ownId)) {
            throw new PeerException("peer " + peer + " is this daemon itself", true);
        }
        if (!SeedAuth.same(proof, SeedAuth.serverProof(key, nonce, serverNonce, ownId, serverId))) {
            throw new PeerException("peer " + peer + " does not prove it holds the seed key", false);
        }
        ByteBuffer mine = SeedWire.frame(SeedWire.PROOF, SeedAuth.MAC_BYTES);
        mine.put(SeedAuth.clientProof(key, nonce, serverNonce, ownId, serverId));
        write(mine.flip(), HANDSHAKE_MILLIS);
    }

    /** Asks for the peer's MANIFEST. */
    SeedWire.Manifest manifest() throws IOException {
        write(SeedWire.frame(SeedWire.MANIFEST_REQUEST, 0).flip(), IDLE_MILLIS);
        ByteBuffer p = expect(SeedWire.MANIFEST, 36, SeedWire.MAX_MANIFEST, IDLE_MILLIS);
        try {
            return SeedWire.readManifest(p);
        } catch (IllegalArgumentException e) {
            throw new PeerException("peer " + peer + ": " + e.getMessage(), false);
        }
    }

    /**
     * Sends the RANGE request for {@code length} bytes of table {@code table} from {@code offset}; its DATA is read
     * by {@link #receive} with the same arguments. At most one request may be asked ahead of the answer being read
     * (the exporter keeps one waiting behind the one it answers).
     */
    void ask(int table, long offset, int length) throws IOException {
        ByteBuffer r = SeedWire.frame(SeedWire.RANGE, SeedWire.RANGE_BYTES);
        r.putInt(table).putLong(offset).putInt(length);
        write(r.flip(), IDLE_MILLIS);
    }

    /**
     * Reads the DATA of a range {@link #ask}ed for, checked to be exactly that range, into {@code address}; each
     * piece goes to {@code landed} as it lands.
     */
    void receive(int table, long offset, int length, long address, Landed landed) throws IOException {
        expectHead(SeedWire.DATA, SeedWire.DATA_HEAD_BYTES + (long) length, IDLE_MILLIS);
        ByteBuffer h = ByteBuffer.allocate(SeedWire.DATA_HEAD_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        read(h, IDLE_MILLIS);
        h.flip();
        int t = h.getInt();
        long o = h.getLong();
        if (t != table || o != offset) {
            throw new PeerException("peer " + peer + " sent table " + t + " at " + o + ", not the range asked for"
                    + " (table " + table + " at " + offset + ")", false);
        }
        link.readInto(address, length, IDLE_MILLIS, landed);
    }

    /** The payload of a frame of {@code type}, of {@code min} to {@code max} bytes; an ERROR becomes its line. */
    private ByteBuffer expect(int type, int min, int max, int millis) throws IOException {
        int n = (int) readHeader(type, min, max, millis);
        ByteBuffer p = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN);
        read(p, millis);
        return p.flip();
    }

    /** Reads a header that must announce {@code type} and exactly {@code length} bytes. */
    private void expectHead(int type, long length, int millis) throws IOException {
        readHeader(type, length, length, millis);
    }

    private long readHeader(int type, long min, long max, int millis) throws IOException {
        header.clear();
        read(header, millis);
        header.flip();
        int got = Byte.toUnsignedInt(header.get());
        header.get();
        header.getShort();
        long n = Integer.toUnsignedLong(header.getInt());
        if (got == SeedWire.ERROR && type != SeedWire.ERROR) {
            if (n < 6 || n > 6 + SeedWire.MAX_MESSAGE) {
                throw new PeerException("peer " + peer + " sent an ERROR of " + n + " bytes", false);
            }
            ByteBuffer p = ByteBuffer.allocate((int) n).order(ByteOrder.LITTLE_ENDIAN);
            read(p, millis);
            p.flip();
            int code = Short.toUnsignedInt(p.getShort());
            int len = p.getInt();
            String m = len >= 0 && len <= p.remaining() ? new String(p.array(), p.position(), len,
                    StandardCharsets.UTF_8) : "";
            throw new PeerException("peer " + peer + " refused: " + SeedWire.codeName(code) + " " + m,
                    code == SeedWire.NOT_READY);
        }
        if (got != type) {
            throw new PeerException("peer " + peer + " sent " + SeedWire.name(got) + " where " + SeedWire.name(type)
                    + " was due", false);
        }
        if (n < min || n > max) {
            throw new PeerException("peer " + peer + " sent a " + SeedWire.name(type) + " of " + n + " bytes, not "
                    + (min == max ? String.valueOf(min) : min + " to " + max), false);
        }
        return n;
    }

    private void read(ByteBuffer b, int millis) throws IOException {
        link.read(b, millis);
    }

    private void write(ByteBuffer b, int millis) throws IOException {
        link.write(b, millis);
    }

    @Override
    public void close() {
        link.close();
    }
}
