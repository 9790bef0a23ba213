package io.engramhost.seed;

import io.netty.buffer.ByteBuf;
import io.netty.channel.ChannelHandlerContext;
import io.netty.handler.codec.ByteToMessageDecoder;
import java.util.List;

/**
 * The seeding frames of docs/seeding.md ("Wire format") as they arrive at an exporter: an 8-byte header, {@code u8
 * type, u8 0, u16 0, u32 payload length} (little-endian), then the payload. Each complete frame goes on as a {@link
 * Frame} whose payload is a slice of what the transport read (no copy); its receiver releases it. Every bound is
 * checked here, where the bytes enter, once: a header's reserved bytes and its length (at most {@code maxPayload},
 * before any payload is read), and the bytes a peer may send ahead of their answers ({@code maxAhead}: what is
 * buffered here and the frames not yet {@link #taken}). Past a bound it passes on one {@link Malformed} naming it and
 * drops everything after.
 */
final class SeedFrameDecoder extends ByteToMessageDecoder {
    /** One frame; {@code payload} is a retained slice, released by whoever handles the frame. */
    record Frame(int type, ByteBuf payload) {
        int bytes() {
            return SeedWire.HEADER + payload.readableBytes();
        }
    }

    /**
     * What broke the framing, in a line for the ERROR the peer is sent: {@code now}, too much sent ahead (refused at
     * once), or a bad header (refused in its turn, after the frames before it).
     */
    record Malformed(String line, boolean now) {
    }

    private final int maxPayload;
    private final int maxAhead;
    /** Bytes of the frames passed on and not yet taken (on the channel's event loop, as everything here). */
    private int held;
    private boolean broken;

    SeedFrameDecoder(int maxPayload, int maxAhead) {
        this.maxPayload = maxPayload;
        this.maxAhead = maxAhead;
    }

    /** The receiver has taken {@code f} to answer it: its bytes no longer count as sent ahead. */
    void taken(Frame f) {
        held -= f.bytes();
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) throws Exception {
        if (!broken && msg instanceof ByteBuf b && held + actualReadableBytes() + b.readableBytes() > maxAhead) {
            b.release();
            broke(ctx, "sent more than " + maxAhead + " bytes of requests ahead of their answers: send at most one"
                    + " request ahead of the one being answered");
            return;
        }
        super.channelRead(ctx, msg);
    }

    @Override
    protected void decode(ChannelHandlerContext ctx, ByteBuf in, List<Object> out) {
        if (broken) {
            in.skipBytes(in.readableBytes());
            return;
        }
        while (in.readableBytes() >= SeedWire.HEADER) {
            int at = in.readerIndex();
            int type = in.getUnsignedByte(at);
            long n = in.getUnsignedIntLE(at + 4);
            if (in.getByte(at + 1) != 0 || in.getShortLE(at + 2) != 0) {
                broke(out, in, "a frame header's reserved bytes are not 0");
                return;
            }
            if (n > maxPayload) {
                broke(out, in, SeedWire.name(type) + " of " + n + " bytes: a request has at most " + maxPayload);
                return;
            }
            if (in.readableBytes() < SeedWire.HEADER + n) {
                return;
            }
            in.skipBytes(SeedWire.HEADER);
            Frame f = new Frame(type, in.readRetainedSlice((int) n));
            held += f.bytes();
            out.add(f);
        }
    }

    private void broke(List<Object> out, ByteBuf in, String line) {
        broken = true;
        in.skipBytes(in.readableBytes());
        out.add(new Malformed(line, false));
    }

    private void broke(ChannelHandlerContext ctx, String line) {
        broken = true;
        ctx.fireChannelRead(new Malformed(line, true));
    }
}
