package io.engramhost.store;

import io.engramhost.seed.SeedAuth;
import io.engramhost.seed.SeedKey;
import io.engramhost.seed.SeedWire;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A seeding peer written in the test from docs/seeding.md's wire format alone, on a real TCP socket of loopback: it
 * proves the key, answers MANIFEST with the tables given, and sends each range asked for from the checkpoint file
 * ({@code FileChannel.transferTo}). It counts the DATA frames it sent and the connections still open.
 */
final class FileExporter implements AutoCloseable {
    /** A table as exported: its bytes are {@code bytes} of {@code file} from {@code offset}. */
    record Table(String name, Path file, long offset, long bytes, long digest) {
    }

    private final ServerSocketChannel listener;
    private final SeedKey key;
    private final List<Table> tables;
    private final byte[] id = SeedAuth.random(SeedAuth.ID_BYTES);
    private final AtomicInteger datas = new AtomicInteger();
    private final AtomicInteger open = new AtomicInteger();
    private final List<SocketChannel> connections = new ArrayList<>();

    FileExporter(SeedKey key, List<Table> tables) throws IOException {
        this.key = key;
        this.tables = List.copyOf(tables);
        listener = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        Thread t = new Thread(this::accept, "file-exporter");
        t.setDaemon(true);
        t.start();
    }

    InetSocketAddress address() throws IOException {
        return (InetSocketAddress) listener.getLocalAddress();
    }

    /** DATA frames sent, in full. */
    int datas() {
        return datas.get();
    }

    /** Waits until every connection a requester opened has ended (it closed its side). */
    void awaitNoConnections() throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (open.get() > 0) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError(open.get() + " seeding connections still open after 20 s");
            }
            Thread.sleep(10);
        }
    }

    private void accept() {
        while (listener.isOpen()) {
            try {
                SocketChannel c = listener.accept();
                open.incrementAndGet();
                synchronized (connections) {
                    connections.add(c);
                }
                Thread t = new Thread(() -> serve(c), "file-exporter-conn");
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                return;
            }
        }
    }

    private static ByteBuffer read(SocketChannel c, int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN);
        while (b.hasRemaining()) {
            if (c.read(b) < 0) {
                throw new IOException("closed");
            }
        }
        return b.flip();
    }

    private static void write(SocketChannel c, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            c.write(b);
        }
    }

    /** A frame of {@code type}: its payload. */
    private static ByteBuffer frame(SocketChannel c, int type) throws IOException {
        ByteBuffer h = read(c, SeedWire.HEADER);
        int got = h.get(0);
        int n = h.getInt(4);
        if (got != type || n > SeedWire.MAX_REQUEST_PAYLOAD) {
            throw new IOException("frame " + got + " of " + n + " bytes");
        }
        return read(c, n);
    }

    private void serve(SocketChannel c) {
        try (c) {
            ByteBuffer hello = frame(c, SeedWire.HELLO);
            hello.position(8);
            byte[] cNonce = new byte[SeedAuth.NONCE_BYTES];
            byte[] cId = new byte[SeedAuth.ID_BYTES];
            hello.get(cNonce).get(cId);
            byte[] sNonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
            ByteBuffer ch = SeedWire.frame(SeedWire.CHALLENGE, SeedWire.CHALLENGE_BYTES);
            ch.putShort((short) SeedWire.VERSION).putShort((short) 0).put(sNonce).put(id)
                    .put(SeedAuth.serverProof(key, cNonce, sNonce, cId, id));
            write(c, ch.flip());
            byte[] proof = new byte[SeedAuth.MAC_BYTES];
            frame(c, SeedWire.PROOF).get(proof);
            if (!SeedAuth.same(proof, SeedAuth.clientProof(key, cNonce, sNonce, cId, id))) {
                throw new IOException("the requester does not hold the key");
            }
            List<SeedWire.Table> manifest = new ArrayList<>();
            tables.forEach(t -> manifest.add(new SeedWire.Table(t.name(), t.bytes(), t.digest())));
            while (true) {
                ByteBuffer h = read(c, SeedWire.HEADER);
                int type = h.get(0);
                ByteBuffer p = read(c, h.getInt(4));
                if (type == SeedWire.MANIFEST_REQUEST) {
                    write(c, SeedWire.manifest(new byte[32], manifest));
                } else if (type == SeedWire.RANGE) {
                    int table = p.getInt();
                    long offset = p.getLong();
                    int length = p.getInt();
                    Table t = tables.get(table);
                    write(c, SeedWire.dataHead(table, offset, length));
                    try (FileChannel f = FileChannel.open(t.file(), StandardOpenOption.READ)) {
                        long sent = 0;
                        while (sent < length) {
                            sent += f.transferTo(t.offset() + offset + sent, length - sent, c);
                        }
                    }
                    datas.incrementAndGet();
                } else {
                    throw new IOException("frame " + type);
                }
            }
        } catch (IOException e) {
            // the requester closed the connection, or broke the protocol: this peer ends it
        } finally {
            open.decrementAndGet();
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        synchronized (connections) {
            for (SocketChannel c : connections) {
                c.close();
            }
        }
    }
}
