package io.engramhost.seed;

import io.netty.buffer.Unpooled;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.socket.SocketChannel;
import io.netty.handler.codec.DecoderException;
import io.netty.handler.ssl.NotSslRecordException;
import io.netty.handler.ssl.SslHandshakeCompletionEvent;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.ScheduledFuture;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * One peer's connection to a {@link SeedExporter}, everything on its event loop: the handshake, then its requests
 * answered one at a time, each as a {@link SeedFrameDecoder.Frame} read in place (no copy of its payload). While an
 * answer is written the connection reads nothing more, and the frames already read wait here (at most {@link
 * SeedExporter#MAX_AHEAD} bytes, bounded by the decoder). Its one deadline is the limit of what it waits for now: the
 * handshake from the accept, the next request from the last answer, the peer taking a range.
 */
final class ExportConnection extends ChannelInboundHandlerAdapter {
    private enum Step {
        HELLO, PROOF, READY, CLOSED
    }

    private final SeedExporter exporter;
    private final SocketChannel ch;
    private final SeedFrameDecoder frames;
    private final ArrayDeque<Object> waiting = new ArrayDeque<>();
    private final String who;
    private Step step = Step.HELLO;
    private boolean answering;
    /** A range is being written: what is written after it waits until the peer has taken it. */
    private boolean sending;
    private boolean counted;
    private ScheduledFuture<?> deadline;
    private byte[] clientNonce;
    private byte[] serverNonce;
    private byte[] clientId;

    ExportConnection(SeedExporter exporter, SocketChannel ch, SeedFrameDecoder frames) {
        this.exporter = exporter;
        this.ch = ch;
        this.frames = frames;
        InetSocketAddress r = ch.remoteAddress();
        this.who = r == null ? "?" : SeedSettings.show(r);
    }

    @Override
    public void channelActive(ChannelHandlerContext ctx) {
        SeedStats stats = exporter.stats;
        if (stats.open.incrementAndGet() > SeedExporter.MAX_PEERS) {
            stats.open.decrementAndGet();
            fail("busy", SeedWire.BUSY, SeedExporter.MAX_PEERS + " peers are connected already (the most at once)");
            return;
        }
        counted = true;
        if (exporter.handshaking.incrementAndGet() > SeedExporter.MAX_HANDSHAKING) {
            exporter.handshaking.decrementAndGet();
            step = Step.CLOSED;
            stats.open.decrementAndGet();
            counted = false;
            fail("busy", SeedWire.BUSY, SeedExporter.MAX_HANDSHAKING
                    + " peers are authenticating already (the most at once)");
            return;
        }
        deadline(SeedExporter.HANDSHAKE_MILLIS, "did not authenticate within " + SeedExporter.HANDSHAKE_MILLIS + " ms");
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) {
        leave();
        if (counted) {
            counted = false;
            exporter.stats.open.decrementAndGet();
        }
        release();
    }

    @Override
    public void handlerRemoved(ChannelHandlerContext ctx) {
        release();
    }

    /** Leaves every step: gives back a handshake's place, and ends the deadline. */
    private void leave() {
        if (step == Step.HELLO || step == Step.PROOF) {
            exporter.handshaking.decrementAndGet();
        }
        step = Step.CLOSED;
        if (deadline != null) {
            deadline.cancel(false);
        }
    }

    /** Drops the frames waiting (the connection is closed). */
    private void release() {
        Object m;
        while ((m = waiting.poll()) != null) {
            if (m instanceof SeedFrameDecoder.Frame f) {
                frames.taken(f);
                f.payload().release();
            }
        }
    }

    /** {@code line} unless the peer sends what it waits for within {@code millis}: ERROR TIMED_OUT, closed. */
    private void deadline(long millis, String line) {
        if (deadline != null) {
            deadline.cancel(false);
        }
        deadline = ch.eventLoop().schedule(() -> fail("timed-out", SeedWire.TIMED_OUT, line), millis,
                TimeUnit.MILLISECONDS);
    }

    private void idle() {
        deadline(SeedExporter.IDLE_MILLIS, "sent no request for " + SeedExporter.IDLE_MILLIS + " ms");
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) {
        if (msg instanceof SeedFrameDecoder.Malformed m && m.now()) {
            fail("bad-request", SeedWire.BAD_REQUEST, m.line());
            return;
        }
        if (!(msg instanceof SeedFrameDecoder.Frame) && !(msg instanceof SeedFrameDecoder.Malformed)) {
            ReferenceCountUtil.release(msg);
            return;
        }
        waiting.add(msg);
        if (step == Step.CLOSED) {
            release();
            return;
        }
        drain();
    }

    @Override
    public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
        end("error", "peer " + who + ": " + cause + "; closing its connection");
    }

    @Override
    public void userEventTriggered(ChannelHandlerContext ctx, Object evt) {
        if (evt instanceof SslHandshakeCompletionEvent e && !e.isSuccess()) {
            Throwable c = e.cause() instanceof DecoderException && e.cause().getCause() != null
                    ? e.cause().getCause() : e.cause();
            end("tls", "peer " + who + " refused: " + (c instanceof NotSslRecordException ? "it does not speak TLS"
                    : "its TLS handshake failed (" + c.getMessage() + ")") + "; a peer needs --seed-tls-cert,"
                    + " --seed-tls-key and --seed-tls-ca too, its certificate signed by this daemon's CA");
        }
        ctx.fireUserEventTriggered(evt);
    }

    /** One line, and the connection closed without an ERROR (it cannot carry one: it broke, or TLS failed). */
    private void end(String reason, String line) {
        if (step == Step.CLOSED) {
            return;
        }
        leave();
        exporter.refuse(reason, line);
        ch.close();
    }

    /** Handles the frames waiting, one at a time, unless an answer is being written. */
    private void drain() {
        Object m;
        while (step != Step.CLOSED && !answering && (m = waiting.poll()) != null) {
            if (m instanceof SeedFrameDecoder.Malformed bad) {
                fail("bad-request", SeedWire.BAD_REQUEST, bad.line());
                return;
            }
            SeedFrameDecoder.Frame f = (SeedFrameDecoder.Frame) m;
            frames.taken(f);
            try {
                handle(f.type(), f.payload().nioBuffer().order(ByteOrder.LITTLE_ENDIAN));
            } finally {
                f.payload().release();
            }
        }
    }

    private void handle(int type, ByteBuffer p) {
        switch (step) {
            case HELLO -> hello(type, p);
            case PROOF -> proof(type, p);
            case READY -> request(type, p);
            default -> {
            }
        }
    }

    private void hello(int type, ByteBuffer p) {
        if (type != SeedWire.HELLO || p.remaining() != SeedWire.HELLO_BYTES) {
            fail("bad-request", SeedWire.BAD_REQUEST, "expected HELLO of " + SeedWire.HELLO_BYTES + " bytes, got "
                    + SeedWire.name(type) + " of " + p.remaining());
            return;
        }
        int magic = p.getInt();
        int version = Short.toUnsignedInt(p.getShort());
        p.getShort();
        if (magic != SeedWire.MAGIC || version != SeedWire.VERSION) {
            fail("bad-request", SeedWire.BAD_REQUEST, "not a seeding HELLO of version " + SeedWire.VERSION
                    + " (magic " + Integer.toHexString(magic) + ", version " + version + ")");
            return;
        }
        clientNonce = new byte[SeedAuth.NONCE_BYTES];
        clientId = new byte[SeedAuth.ID_BYTES];
        p.get(clientNonce).get(clientId);
        serverNonce = SeedAuth.random(SeedAuth.NONCE_BYTES);
        ByteBuffer c = SeedWire.frame(SeedWire.CHALLENGE, SeedWire.CHALLENGE_BYTES);
        c.putShort((short) SeedWire.VERSION).putShort((short) 0).put(serverNonce).put(exporter.id)
                .put(SeedAuth.serverProof(exporter.key, clientNonce, serverNonce, clientId, exporter.id));
        ch.writeAndFlush(Unpooled.wrappedBuffer(c.flip()));
        step = Step.PROOF;
    }

    private void proof(int type, ByteBuffer p) {
        if (type != SeedWire.PROOF || p.remaining() != SeedAuth.MAC_BYTES) {
            fail("bad-request", SeedWire.BAD_REQUEST, "expected PROOF, got " + SeedWire.name(type));
            return;
        }
        byte[] mac = new byte[SeedAuth.MAC_BYTES];
        p.get(mac);
        if (!SeedAuth.same(mac, SeedAuth.clientProof(exporter.key, clientNonce, serverNonce, clientId, exporter.id))) {
            fail("not-authenticated", SeedWire.NOT_AUTHENTICATED, "did not prove it holds the seed key: its"
                    + " --seed-key file differs from this daemon's; give every node the same --seed-key file");
            return;
        }
        exporter.handshaking.decrementAndGet();
        step = Step.READY;
        idle();
    }

    private void request(int type, ByteBuffer p) {
        CompletableFuture<SeedExporter.Made> made = exporter.export();
        if (made == null) {
            fail("not-ready", SeedWire.NOT_READY, "this daemon is still loading its tables");
            return;
        }
        if (!made.isDone()) { // answered once the export is made, on this connection's event loop
            answering = true;
            ch.config().setAutoRead(false);
            ByteBuffer kept = ByteBuffer.allocate(p.remaining()).order(ByteOrder.LITTLE_ENDIAN).put(p).flip();
            made.whenComplete((x, e) -> ch.eventLoop().execute(() -> {
                answering = false;
                if (step == Step.CLOSED) {
                    return;
                }
                ch.config().setAutoRead(true);
                request(type, kept);
                drain();
            }));
            return;
        }
        SeedExporter.Made ex;
        try {
            ex = made.join();
        } catch (RuntimeException e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            fail("unavailable", SeedWire.NOT_READY, "cannot export the tables: " + c.getMessage());
            return;
        }
        if (type == SeedWire.MANIFEST_REQUEST && p.remaining() == 0) {
            ch.writeAndFlush(Unpooled.wrappedBuffer(ex.manifest().duplicate()));
            idle();
            return;
        }
        if (type != SeedWire.RANGE || p.remaining() != SeedWire.RANGE_BYTES) {
            fail("bad-request", SeedWire.BAD_REQUEST, "expected MANIFEST_REQUEST or RANGE, got "
                    + SeedWire.name(type) + " of " + p.remaining() + " bytes");
            return;
        }
        range(ex, Integer.toUnsignedLong(p.getInt()), p.getLong(), Integer.toUnsignedLong(p.getInt()));
    }

    private void range(SeedExporter.Made ex, long table, long offset, long length) {
        List<ExportView.Table> tables = ex.export().tables();
        if (table >= tables.size()) {
            fail("bad-request", SeedWire.BAD_REQUEST, "RANGE of table " + table + ": there are " + tables.size());
            return;
        }
        ExportView.Table t = tables.get((int) table);
        if (length == 0 || length > SeedWire.MAX_RANGE || offset < 0 || offset > t.bytes() - length) {
            fail("bad-request", SeedWire.BAD_REQUEST, "RANGE of table '" + t.name() + "' (" + t.bytes()
                    + " bytes): " + length + " bytes at " + offset + " is not within it, or over "
                    + SeedWire.MAX_RANGE);
            return;
        }
        ByteBuffer head = SeedWire.dataHead((int) table, offset, length);
        answering = true;
        ch.config().setAutoRead(false);
        deadline(SeedExporter.WRITE_MILLIS, "did not take a range of " + length + " bytes within "
                + SeedExporter.WRITE_MILLIS + " ms");
        sending = true;
        ch.write(Unpooled.wrappedBuffer(head));
        ch.writeAndFlush(ex.sources().get((int) table).range(t.offset() + offset, length)).addListener(
                (ChannelFutureListener) f -> {
                    sending = false;
                    if (!f.isSuccess() && step != Step.CLOSED) {
                        step = Step.CLOSED;
                        exporter.refuse("error", "peer " + who + ": sending " + length + " bytes of table '"
                                + t.name() + "' failed (" + f.cause() + "); the connection is closed");
                    }
                    if (!f.isSuccess() || step == Step.CLOSED) {
                        ch.close();
                        return;
                    }
                    exporter.stats.bytesSent.addAndGet(length);
                    exporter.stats.rangesSent.incrementAndGet();
                    answering = false;
                    idle();
                    ch.config().setAutoRead(true);
                    drain();
                });
    }

    /** One line, an ERROR to the peer, and the connection closed. */
    private void fail(String reason, int code, String line) {
        if (step == Step.CLOSED && !"busy".equals(reason)) {
            return;
        }
        if (!"busy".equals(reason)) {
            leave();
        } else {
            step = Step.CLOSED;
            if (deadline != null) {
                deadline.cancel(false);
            }
        }
        exporter.refuse(reason, "peer " + who + " refused: " + line);
        ch.config().setAutoRead(false);
        if (sending) { // an ERROR would wait behind the range for a peer that does not read it: close at once
            ch.close();
            return;
        }
        ch.writeAndFlush(Unpooled.wrappedBuffer(SeedWire.error(code, line))).addListener(ChannelFutureListener.CLOSE);
    }
}
