package io.engramhost.cli;

import io.engramhost.checkpoint.Xxh64;
import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedWire;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A seeding peer written in the test from docs/seeding.md alone, that holds the key and relays a real exporter
 * (it authenticates on both sides, forwards MANIFEST and RANGE), but misbehaves on the way: {@link Mode#LIE} flips
 * one byte of the first DATA it relays, {@link Mode#DIE} closes every connection halfway through the first DATA,
 * {@link Mode#COLLIDE} changes two 8-byte words of the first DATA so that its range's XXH64, and so the table's engram
 * digest v1, stay what they were ({@link #collide}: XXH64 is not collision resistant, and a peer with the key can do
 * this to any range). As conformance/impostor_daemon.py does for the Unix protocol, no hook in the daemon is needed.
 */
final class SeedProxy implements AutoCloseable {
    enum Mode { LIE, DIE, COLLIDE }

    private static final long P1 = 0x9E3779B185EBCA87L;
    private static final long P2 = 0xC2B2AE3D27D4EB4FL;

    private final ServerSocket listener;
    private final InetSocketAddress upstream;
    private final SeedKey key;
    private final Mode mode;
    private final byte[] id = SeedAuth.random(SeedAuth.ID_BYTES);
    private final AtomicInteger datas = new AtomicInteger();
    private final AtomicInteger forged = new AtomicInteger();
    private final List<Socket> open = new ArrayList<>();
    private final Thread acceptor;

    SeedProxy(InetSocketAddress upstream, SeedKey key, Mode mode) throws IOException {
        this.listener = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
        this.upstream = upstream;
        this.key = key;
        this.mode = mode;
        this.acceptor = new Thread(this::accept, "seed-proxy");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    String address() {
        return "127.0.0.1:" + listener.getLocalPort();
    }

    /** DATA frames relayed (or begun). */
    int datas() {
        return datas.get();
    }

    /** DATA frames relayed with other bytes of the same XXH64 (checked here, on the bytes sent). */
    int forged() {
        return forged.get();
    }

    /** {@code x} such that {@code x * a == 1} modulo 2^64, for an odd {@code a} (Newton's iteration). */
    private static long inverse(long a) {
        long x = a;
        for (int i = 0; i < 6; i++) {
            x *= 2 - a * x;
        }
        return x;
    }

    private static long round(long acc, long input) {
        return Long.rotateLeft(acc + input * P2, 31) * P1;
    }

    /**
     * Changes the XXH64 (seed 0) input of {@code length} (at least 64) bytes at {@code off} of {@code b} without
     * changing its hash: XXH64 takes the first lane's 8-byte words at offsets 0 and 32 into one accumulator with an
     * invertible round, so after flipping a bit of the first word the second is solved for, which gives the lane the
     * accumulator it had; the other lanes, the length and the tail are as they were.
     */
    static void collide(byte[] b, int off, int length) {
        if (length < 64) {
            throw new IllegalArgumentException("a range of " + length + " bytes: the forgery needs 64");
        }
        ByteBuffer w = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        long v = P1 + P2; // the first lane's start, seed 0
        long w0 = w.getLong(off);
        long target = round(round(v, w0), w.getLong(off + 32));
        long forged0 = w0 ^ 1;
        long forged32 = (Long.rotateRight(target * inverse(P1), 31) - round(v, forged0)) * inverse(P2);
        w.putLong(off, forged0).putLong(off + 32, forged32);
    }

    private void accept() {
        while (!listener.isClosed()) {
            try {
                Socket s = listener.accept();
                synchronized (open) {
                    open.add(s);
                }
                Thread t = new Thread(() -> relay(s), "seed-proxy-conn");
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                return;
            }
        }
    }

    private static ByteBuffer le(int n) {
        return ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN);
    }

    private static byte[] frame(DataInputStream in) throws IOException {
        byte[] h = new byte[SeedWire.HEADER];
        in.readFully(h);
        int n = ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN).getInt(4);
        byte[] all = new byte[SeedWire.HEADER + n];
        System.arraycopy(h, 0, all, 0, h.length);
        in.readFully(all, SeedWire.HEADER, n);
        return all;
    }

    private void relay(Socket down) {
        try (down; Socket up = new Socket()) {
            up.connect(upstream, 2000);
            synchronized (open) {
                open.add(up);
            }
            DataInputStream din = new DataInputStream(down.getInputStream());
            OutputStream dout = down.getOutputStream();
            DataInputStream uin = new DataInputStream(up.getInputStream());
            OutputStream uout = up.getOutputStream();
            // downstream: the requester's HELLO, our CHALLENGE, its PROOF
            ByteBuffer hello = ByteBuffer.wrap(frame(din)).order(ByteOrder.LITTLE_ENDIAN);
            hello.position(SeedWire.HEADER + 8);
            byte[] cNonce = new byte[SeedAuth.NONCE_BYTES];
            byte[] cId = new byte[SeedAuth.ID_BYTES];
            hello.get(cNonce).get(cId);
            byte[] sNonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
            ByteBuffer ch = SeedWire.frame(SeedWire.CHALLENGE, SeedWire.CHALLENGE_BYTES);
            ch.putShort((short) SeedWire.VERSION).putShort((short) 0).put(sNonce).put(id)
                    .put(SeedAuth.serverProof(key, cNonce, sNonce, cId, id));
            dout.write(ch.array());
            frame(din); // its PROOF: the requester is the one under test, trusted here
            // upstream: our own HELLO and PROOF
            byte[] myNonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
            ByteBuffer h = SeedWire.frame(SeedWire.HELLO, SeedWire.HELLO_BYTES);
            h.putInt(SeedWire.MAGIC).putShort((short) SeedWire.VERSION).putShort((short) 0).put(myNonce).put(id);
            uout.write(h.array());
            ByteBuffer uc = ByteBuffer.wrap(frame(uin)).order(ByteOrder.LITTLE_ENDIAN);
            uc.position(SeedWire.HEADER + 4);
            byte[] uNonce = new byte[SeedAuth.NONCE_BYTES];
            byte[] uId = new byte[SeedAuth.ID_BYTES];
            uc.get(uNonce).get(uId);
            ByteBuffer p = SeedWire.frame(SeedWire.PROOF, SeedAuth.MAC_BYTES);
            p.put(SeedAuth.clientProof(key, myNonce, uNonce, id, uId));
            uout.write(p.array());
            while (true) {
                byte[] req = frame(din);
                uout.write(req);
                byte[] answer = frame(uin);
                if (answer[0] == SeedWire.DATA) {
                    int k = datas.getAndIncrement();
                    if (mode == Mode.LIE && k == 0) {
                        answer[answer.length / 2 + SeedWire.HEADER / 2] ^= 0x01;
                    }
                    if (mode == Mode.COLLIDE && k == 0) {
                        int off = SeedWire.HEADER + SeedWire.DATA_HEAD_BYTES;
                        int len = answer.length - off;
                        long before = Xxh64.hash(answer, off, len, 0);
                        byte[] original = java.util.Arrays.copyOfRange(answer, off, answer.length);
                        collide(answer, off, len);
                        if (Xxh64.hash(answer, off, len, 0) == before && !java.util.Arrays.equals(original, 0,
                                len, answer, off, answer.length)) {
                            forged.incrementAndGet();
                        }
                    }
                    if (mode == Mode.DIE) {
                        dout.write(answer, 0, answer.length / 2);
                        dout.flush();
                        return;
                    }
                }
                dout.write(answer);
            }
        } catch (IOException e) {
            // a connection the requester or the upstream ended
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        synchronized (open) {
            for (Socket s : open) {
                s.close();
            }
        }
    }

    /** A raw client of an exporter: HELLO, then a PROOF made with {@code wrong}; returns the first frame back. */
    static byte[] wrongProof(InetSocketAddress exporter, SeedKey wrong) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(exporter, 2000);
            s.setSoTimeout(5000);
            InputStream in = s.getInputStream();
            DataInputStream din = new DataInputStream(in);
            byte[] nonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
            byte[] cid = SeedAuth.random(SeedAuth.ID_BYTES);
            ByteBuffer h = SeedWire.frame(SeedWire.HELLO, SeedWire.HELLO_BYTES);
            h.putInt(SeedWire.MAGIC).putShort((short) SeedWire.VERSION).putShort((short) 0).put(nonce).put(cid);
            s.getOutputStream().write(h.array());
            ByteBuffer c = ByteBuffer.wrap(frame(din)).order(ByteOrder.LITTLE_ENDIAN);
            c.position(SeedWire.HEADER + 4);
            byte[] sn = new byte[SeedAuth.NONCE_BYTES];
            byte[] sid = new byte[SeedAuth.ID_BYTES];
            c.get(sn).get(sid);
            ByteBuffer p = SeedWire.frame(SeedWire.PROOF, SeedAuth.MAC_BYTES);
            p.put(SeedAuth.clientProof(wrong, nonce, sn, cid, sid));
            s.getOutputStream().write(p.array());
            byte[] back = frame(din);
            if (in.read() != -1) {
                throw new IOException("the exporter did not close after its ERROR");
            }
            return back;
        }
    }

    /** Sends {@code bytes} raw after a header announcing {@code type} with {@code length}; returns the answer. */
    static byte[] rawFrame(InetSocketAddress exporter, int type, int length) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(exporter, 2000);
            s.setSoTimeout(5000);
            ByteBuffer h = le(SeedWire.HEADER);
            h.put((byte) type).put((byte) 0).putShort((short) 0).putInt(length);
            s.getOutputStream().write(h.array());
            return frame(new DataInputStream(s.getInputStream()));
        }
    }
}
