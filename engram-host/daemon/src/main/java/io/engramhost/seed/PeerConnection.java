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
import java.util.Set;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSocket;

/**
 * One authenticated connection to an exporting peer, as the requester sees it: connect, the handshake, MANIFEST,
 * then ranges read straight into the caller's memory. Every read has a deadline for the whole of it (a frame's
 * header and small payloads {@link #IDLE_MILLIS}, a MANIFEST's too; a DATA range {@link #IDLE_MILLIS} and one second
 * per {@link #MIN_RANGE_RATE} bytes), every frame's length is checked at its header against what was asked, a
 * MANIFEST is read only within {@link #MANIFEST_MEMORY} held by all peers' MANIFESTs at once, and anything amiss is
 * a {@link PeerException} whose message names the peer; the connection is then useless and closed by its owner.
 *
 * <p>Without TLS the frames go over a non-blocking {@link SocketChannel}, a range read straight into the memory; with
 * TLS ({@link SeedTls}) over a JDK {@link SSLSocket}, TLS 1.3, whose decrypted bytes come in pieces of at most
 * {@link #TLS_PIECE} bytes that are copied into the memory.
 */
final class PeerConnection implements AutoCloseable {
    static final int CONNECT_MILLIS = 2000;
    static final int HANDSHAKE_MILLIS = 5000;
    /** A frame's header, or a payload that is not a DATA range, arrives within this long in all, or the read fails. */
    static final int IDLE_MILLIS = 10_000;
    /**
     * A DATA range arrives at no less than this many bytes a second, after a first {@link #IDLE_MILLIS}: a peer that
     * trickles is dropped (its tables go to another peer or the disk) instead of holding the load.
     */
    static final int MIN_RANGE_RATE = 1 << 20;
    /**
     * The most bytes of MANIFEST payload that the requesters of this process hold at once (one MANIFEST of the
     * largest kind, or many small ones): more peers each announcing a large MANIFEST wait for it, at most
     * {@link #IDLE_MILLIS}, instead of filling the heap.
     */
    static final int MANIFEST_MEMORY = SeedWire.MAX_MANIFEST;
    private static final Semaphore MANIFEST_KIB = new Semaphore(MANIFEST_MEMORY >> 10);
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

    /** A read or write that did not end within its {@code millis}: {@code done} of {@code want} bytes. */
    static PeerException late(String peer, boolean write, int millis, long done, long want) {
        return new PeerException("peer " + peer + (write ? " did not take " : " did not send ") + want + " bytes within "
                + millis + " ms (" + done + " " + (write ? "taken" : "arrived") + ")", false);
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

    /** The bytes of one connection, both ways, each read and write with a deadline for the whole of it. */
    private interface Link {
        /** Fills {@code b} within {@code millis} in all. */
        void read(ByteBuffer b, int millis) throws IOException;

        /**
         * Reads {@code length} bytes into native memory at {@code address} within {@code millis} in all, telling
         * {@code landed} of each piece as it lands (in order, at most {@link #LAND_PIECE} bytes at a time), while the
         * socket takes in the next.
         */
        void readInto(long address, int length, int millis, Landed landed) throws IOException;

        /** Writes all of {@code b} within {@code millis} in all. */
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
            long deadline = System.nanoTime() + millis * 1_000_000L;
            int want = b.remaining();
            while (b.hasRemaining()) {
                int n = channel.read(b);
                if (n < 0) {
                    throw new PeerException("peer " + peer + " closed the connection", false);
                }
                if (n == 0) {
                    await(SelectionKey.OP_READ, deadline, millis, want - b.remaining(), want);
                }
            }
        }

        @Override
        public void readInto(long address, int length, int millis, Landed landed) throws IOException {
            long deadline = System.nanoTime() + millis * 1_000_000L;
            ByteBuffer b = RawMemory.buffer(address, length);
            for (int done = 0; done < length; ) {
                b.limit(Math.min(length, done + LAND_PIECE));
                int n = channel.read(b);
                if (n < 0) {
                    throw new PeerException("peer " + peer + " closed the connection", false);
                }
                if (n == 0) {
                    await(SelectionKey.OP_READ, deadline, millis, done, length);
                    continue;
                }
                landed.landed(address + done, n);
                done += n;
            }
        }

        @Override
        public void write(ByteBuffer b, int millis) throws IOException {
            long deadline = System.nanoTime() + millis * 1_000_000L;
            int want = b.remaining();
            while (b.hasRemaining()) {
                if (channel.write(b) == 0) {
                    await(SelectionKey.OP_WRITE, deadline, millis, want - b.remaining(), want);
                }
            }
        }

        /** Waits for {@code op} until {@code deadline}; past it, fails saying how much of {@code want} was done. */
        private void await(int op, long deadline, int millis, long done, long want) throws IOException {
            long left = (deadline - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                throw late(peer, op == SelectionKey.OP_WRITE, millis, done, want);
            }
            SelectionKey k = channel.keyFor(selector);
            if (k == null) {
                k = channel.register(selector, op);
            } else {
                k.interestOps(op);
            }
            if (selector.select(left) == 0) {
                throw late(peer, op == SelectionKey.OP_WRITE, millis, done, want);
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

        /**
         * Reads up to {@code n} bytes into {@code dst[off...]}, at least one, before {@code deadline}; {@code done}
         * of {@code want} were read before, for the message.
         */
        private int some(byte[] dst, int off, int n, long deadline, int millis, long done, long want)
                throws IOException {
            long left = (deadline - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                throw late(peer, false, millis, done, want);
            }
            socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, left));
            int got;
            try {
                got = in.read(dst, off, n);
            } catch (SocketTimeoutException e) {
                throw late(peer, false, millis, done, want);
            }
            if (got < 0) {
                throw new PeerException("peer " + peer + " closed the connection", false);
            }
            return got;
        }

        @Override
        public void read(ByteBuffer b, int millis) throws IOException {
            long deadline = System.nanoTime() + millis * 1_000_000L;
            int want = b.remaining();
            while (b.hasRemaining()) {
                int n = some(piece, 0, Math.min(piece.length, b.remaining()), deadline, millis,
                        want - b.remaining(), want);
                b.put(piece, 0, n);
            }
        }

        @Override
        public void readInto(long address, int length, int millis, Landed landed) throws IOException {
            long deadline = System.nanoTime() + millis * 1_000_000L;
            RawMemory.checkRange(address, length);
            for (int done = 0; done < length; ) {
                int n = some(piece, 0, Math.min(Math.min(piece.length, LAND_PIECE), length - done), deadline, millis,
                        done, length);
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
            throw new PeerException("peer " + peer + " does not prove it holds the seed key: its --seed-key file"
                    + " differs from this daemon's; give every node the same --seed-key file (the same bytes)", false);
        }
        ByteBuffer mine = SeedWire.frame(SeedWire.PROOF, SeedAuth.MAC_BYTES);
        mine.put(SeedAuth.clientProof(key, nonce, serverNonce, ownId, serverId));
        write(mine.flip(), HANDSHAKE_MILLIS);
    }

    /**
     * Asks for the peer's MANIFEST, and keeps of it the tables named in {@code wanted}. Its payload is read only once
     * {@link #MANIFEST_MEMORY} has room for it beside the other peers' (waiting {@link #IDLE_MILLIS} at most), and
     * held only until it is decoded.
     */
    SeedWire.Manifest manifest(Set<String> wanted) throws IOException {
        write(SeedWire.frame(SeedWire.MANIFEST_REQUEST, 0).flip(), IDLE_MILLIS);
        int n = (int) readHeader(SeedWire.MANIFEST, 36, SeedWire.MAX_MANIFEST, IDLE_MILLIS);
        int kib = (n + 1023) >> 10;
        boolean held;
        try {
            held = MANIFEST_KIB.tryAcquire(kib, IDLE_MILLIS, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new PeerException("peer " + peer + ": interrupted while its MANIFEST waited", false);
        }
        if (!held) {
            throw new PeerException("peer " + peer + " announced a MANIFEST of " + n + " bytes, and other peers'"
                    + " MANIFESTs held the " + (MANIFEST_MEMORY >> 20) + " MiB they may hold at once for "
                    + IDLE_MILLIS + " ms", false);
        }
        try {
            ByteBuffer p = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN);
            read(p, IDLE_MILLIS);
            return SeedWire.readManifest(p.flip(), wanted);
        } catch (IllegalArgumentException e) {
            throw new PeerException("peer " + peer + ": " + e.getMessage(), false);
        } finally {
            MANIFEST_KIB.release(kib);
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
        link.readInto(address, length, IDLE_MILLIS + (int) (1000L * length / MIN_RANGE_RATE), landed);
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
