package io.engramhost.bench;

import io.engramhost.os.RawMemory;
import io.grpc.Detachable;
import io.grpc.Drainable;
import io.grpc.KnownLength;
import io.grpc.MethodDescriptor;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * {@link SeedTransportBench}'s gRPC method, hand-written (no protobuf): the ask and its marshaller, and the response
 * marshaller that streams a {@link Piece} of the source's read-only mapping as a {@link KnownLength}
 * {@link Drainable} and, on the client, hands over the received stream ({@link Detachable}); and the server's side of
 * a call, which sends only while the call is ready.
 */
final class SeedTransportGrpc {
    /** An ask's size on the wire: offset and length (8 bytes each) and the message size (4), little-endian. */
    static final int ASK_BYTES = 20;
    /** The scratch array a {@link Piece} is drained through into gRPC's buffer. */
    private static final int DRAIN_CHUNK = 64 << 10;

    /** The one method: a server-streaming call, an {@link Ask} in, the range's {@link Piece}s out. */
    static final MethodDescriptor<Ask, Object> RANGE_METHOD = MethodDescriptor.<Ask, Object>newBuilder()
            .setType(MethodDescriptor.MethodType.SERVER_STREAMING)
            .setFullMethodName(MethodDescriptor.generateFullMethodName("engram.bench.Seed", "Range"))
            .setRequestMarshaller(new AskMarshaller())
            .setResponseMarshaller(new PieceMarshaller())
            .build();

    private SeedTransportGrpc() {
    }

    /**
     * gRPC's answer to an ask: the range of the read-only mapping at {@code base} as messages of {@code ask.message}
     * bytes, sent while the call is ready.
     */
    static void serveRange(long base, Ask ask, StreamObserver<Object> observer) {
        ServerCallStreamObserver<Object> out = (ServerCallStreamObserver<Object>) observer;
        Runnable pump = new Runnable() {
            private long next = ask.offset;
            private boolean done;

            @Override
            public void run() {
                long end = ask.offset + ask.length;
                while (!done && next < end && out.isReady()) {
                    int n = (int) Math.min(ask.message, end - next);
                    out.onNext(new Piece(base + next, n));
                    next += n;
                }
                if (!done && next == end) {
                    done = true;
                    out.onCompleted();
                }
            }
        };
        out.setOnCancelHandler(() -> {
        });
        out.setOnReadyHandler(pump);
        pump.run();
    }

    /** A request: the range and the message size. */
    record Ask(long offset, long length, int message) {
    }

    private static final class AskMarshaller implements MethodDescriptor.Marshaller<Ask> {
        @Override
        public InputStream stream(Ask a) {
            ByteBuffer b = ByteBuffer.allocate(ASK_BYTES).order(ByteOrder.LITTLE_ENDIAN);
            b.putLong(a.offset()).putLong(a.length()).putInt(a.message());
            return new ByteArrayInputStream(b.array());
        }

        @Override
        public Ask parse(InputStream in) {
            try {
                ByteBuffer b = ByteBuffer.wrap(in.readNBytes(ASK_BYTES)).order(ByteOrder.LITTLE_ENDIAN);
                return new Ask(b.getLong(), b.getLong(), b.getInt());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** One response message: {@code length} bytes of the source's read-only mapping at {@code address}. */
    record Piece(long address, int length) {
    }

    /**
     * Responses: out, a {@link Piece} as a Drainable, KnownLength stream over the mapping; in, the received message's
     * own buffers, detached from gRPC (the listener copies them to the destination and closes the stream).
     */
    private static final class PieceMarshaller implements MethodDescriptor.Marshaller<Object> {
        @Override
        public InputStream stream(Object p) {
            return new PieceStream((Piece) p);
        }

        @Override
        public InputStream parse(InputStream in) {
            if (in instanceof Detachable d) {
                return d.detach();
            }
            try {
                return new ByteArrayInputStream(in.readAllBytes());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    private static final class PieceStream extends InputStream implements KnownLength, Drainable {
        private static final ThreadLocal<byte[]> SCRATCH = ThreadLocal.withInitial(() -> new byte[DRAIN_CHUNK]);
        private final long address;
        private final int length;
        private int at;

        PieceStream(Piece p) {
            this.address = p.address();
            this.length = p.length();
        }

        @Override
        public int available() {
            return length - at;
        }

        @Override
        public int read() {
            return at < length ? RawMemory.getByte(address + at++) & 0xff : -1;
        }

        @Override
        public int read(byte[] b, int off, int len) {
            if (at == length) {
                return -1;
            }
            int n = Math.min(len, length - at);
            RawMemory.copy(address + at, b, off, n);
            at += n;
            return n;
        }

        @Override
        public int drainTo(OutputStream out) throws IOException {
            byte[] scratch = SCRATCH.get();
            int start = at;
            while (at < length) {
                int n = Math.min(scratch.length, length - at);
                RawMemory.copy(address + at, scratch, 0, n);
                out.write(scratch, 0, n);
                at += n;
            }
            return at - start;
        }
    }
}
