package io.engramhost.seed;

import io.engramhost.os.RawMemory;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufAllocator;
import io.netty.buffer.Unpooled;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.DefaultFileRegion;
import io.netty.handler.stream.ChunkedInput;
import io.netty.handler.stream.ChunkedWriteHandler;
import java.io.IOException;
import java.nio.channels.FileChannel;

/**
 * Where a region's bytes are sent from: a message of the transport for {@code length} bytes at {@code offset} of the
 * region, which the transport writes without a copy in the JVM. Without TLS: a memfd's range is a {@link
 * DefaultFileRegion} over the shared read-only open (sendfile(2)), memory's a buffer over the memory itself. Under TLS
 * (neither sendfile nor a buffer of a whole range can go through it) a range is {@link Pieces} of {@link #TLS_PIECE}
 * bytes for {@link ChunkedWriteHandler}, which writes the next only once the socket has taken the last: read from the
 * memfd with a positional read into a buffer of the transport's, or buffers over the memory.
 */
@FunctionalInterface
interface RangeSource {
    /** Under TLS, a range is sent in pieces of this many bytes. */
    int TLS_PIECE = 256 << 10;

    Object range(long offset, long length);

    /** The source of {@code region}'s ranges, whole or (under TLS) in pieces. */
    static RangeSource of(ExportView.Region region, boolean tls) {
        if (region instanceof ExportView.FileRegion f) {
            return tls ? fromFileInPieces(f.channel()) : fromFile(f.channel());
        }
        long base = ((ExportView.MemoryRegion) region).address();
        return tls ? fromMemoryInPieces(base) : fromMemory(base);
    }

    /** A memfd's ranges: sendfile(2) (or transferTo) from a read-only open of it, shared by every range. */
    static RangeSource fromFile(FileChannel region) {
        return (offset, length) -> new SharedRegion(region, offset, length);
    }

    /** A memfd's ranges under TLS: pieces read from the shared read-only open into the transport's buffers. */
    static RangeSource fromFileInPieces(FileChannel region) {
        return (offset, length) -> new Pieces(offset, length, (alloc, at, n) -> {
            ByteBuf b = alloc.directBuffer(n);
            try {
                while (b.writerIndex() < n) {
                    if (b.writeBytes(region, at + b.writerIndex(), n - b.writerIndex()) < 0) {
                        throw new IOException("the region ends before " + (at + n));
                    }
                }
                return b;
            } catch (IOException | RuntimeException e) {
                b.release();
                throw e;
            }
        });
    }

    /**
     * Ranges of memory at {@code base} (a CPU view of a region), each a buffer over the memory itself: the transport
     * writes from it, and releasing the buffer frees nothing (the view's owner unmaps it). A range is at most
     * {@link SeedWire#MAX_RANGE}, checked before.
     */
    static RangeSource fromMemory(long base) {
        return (offset, length) -> Unpooled.wrappedBuffer(RawMemory.buffer(base + offset, Math.toIntExact(length)));
    }

    /** Ranges of memory at {@code base} under TLS: pieces that are buffers over the memory itself. */
    static RangeSource fromMemoryInPieces(long base) {
        return (offset, length) -> new Pieces(offset, length, (alloc, at, n) ->
                Unpooled.wrappedBuffer(RawMemory.buffer(base + at, n)));
    }

    /** One piece of a range, {@code n} bytes at {@code at}, as a buffer the transport releases once written. */
    @FunctionalInterface
    interface PieceReader {
        ByteBuf read(ByteBufAllocator alloc, long at, int n) throws IOException;
    }

    /** A range as {@link #TLS_PIECE}-byte pieces, for {@link ChunkedWriteHandler}; it holds nothing to close. */
    final class Pieces implements ChunkedInput<ByteBuf> {
        private final long start;
        private final long length;
        private final PieceReader reader;
        private long done;

        Pieces(long start, long length, PieceReader reader) {
            this.start = start;
            this.length = length;
            this.reader = reader;
        }

        @Override
        public boolean isEndOfInput() {
            return done >= length;
        }

        @Override
        public void close() {
            // the region's channel or view is the export's
        }

        @Deprecated
        @Override
        public ByteBuf readChunk(ChannelHandlerContext ctx) throws Exception {
            return readChunk(ctx.alloc());
        }

        @Override
        public ByteBuf readChunk(ByteBufAllocator allocator) throws Exception {
            if (done >= length) {
                return null;
            }
            int n = (int) Math.min(TLS_PIECE, length - done);
            ByteBuf b = reader.read(allocator, start + done, n);
            done += n;
            return b;
        }

        @Override
        public long length() {
            return length;
        }

        @Override
        public long progress() {
            return done;
        }
    }

    /** A region range that leaves its channel open when released (the channel is the export's, shared). */
    final class SharedRegion extends DefaultFileRegion {
        SharedRegion(FileChannel file, long position, long count) {
            super(file, position, count);
        }

        @Override
        protected void deallocate() {
            // the channel stays open for the next range; the export's owner closes it
        }
    }
}
