package io.engramhost.seed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.IoHandlerFactory;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.ServerChannel;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollIoHandler;
import io.netty.channel.epoll.EpollServerSocketChannel;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.stream.ChunkedWriteHandler;
import java.io.DataInputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The exporter's ranges from a CPU view ({@link RangeSource#fromMemory}: how a cuda-vmm region's bytes go out), whole
 * or in the pieces TLS needs ({@link RangeSource#fromMemoryInPieces}, through {@link ChunkedWriteHandler}), over a real
 * loopback socket on each of Netty's transports the exporter uses: the peer reads exactly the memory's bytes, and
 * sending them frees nothing (the view's owner unmaps it).
 */
class SeedRangeFromMemoryTest {
    @ParameterizedTest
    @CsvSource({"epoll, false", "nio, false", "epoll, true"})
    void shouldSendRangesStraightFromMemoryAndLeaveItToItsOwner(String transport, boolean pieces) throws Exception {
        IoHandlerFactory io;
        Class<? extends ServerChannel> channel;
        if (transport.equals("epoll")) {
            Assumptions.assumeTrue(Epoll.isAvailable(), () -> "no epoll: " + Epoll.unavailabilityCause());
            io = EpollIoHandler.newFactory();
            channel = EpollServerSocketChannel.class;
        } else {
            io = NioIoHandler.newFactory();
            channel = NioServerSocketChannel.class;
        }
        long size = (3L << 20) + 5;
        long[][] ranges = {{0, 1 << 20}, {(1 << 20) + 7, (2L << 20) - 2}, {size - 1, 1}};
        List<Object> sent = new CopyOnWriteArrayList<>();
        EventLoopGroup loop = new MultiThreadIoEventLoopGroup(1, io);
        try (Mapping m = Posix.mmapAnonymous(size, "a CPU view's stand-in")) {
            for (long i = 0; i < size; i++) {
                RawMemory.putByte(m.address() + i, (byte) (i * 31 + (i >> 12)));
            }
            RangeSource from = pieces ? RangeSource.fromMemoryInPieces(m.address())
                    : RangeSource.fromMemory(m.address());
            Channel server = new ServerBootstrap().group(loop).channel(channel)
                    .childHandler(new ChannelInitializer<SocketChannel>() {
                        @Override
                        protected void initChannel(SocketChannel ch) {
                            if (pieces) {
                                ch.pipeline().addLast(new ChunkedWriteHandler());
                            }
                            ch.pipeline().addLast(new ChannelInboundHandlerAdapter() {
                                @Override
                                public void channelActive(ChannelHandlerContext ctx) {
                                    for (int r = 0; r < ranges.length; r++) {
                                        Object b = from.range(ranges[r][0], ranges[r][1]);
                                        sent.add(b);
                                        if (r < ranges.length - 1) {
                                            ctx.write(b);
                                        } else {
                                            ctx.writeAndFlush(b).addListener(ChannelFutureListener.CLOSE);
                                        }
                                    }
                                }
                            });
                        }
                    }).bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)).sync().channel();
            try (Socket s = new Socket()) {
                s.connect(server.localAddress(), 2000);
                s.setSoTimeout(10_000);
                DataInputStream in = new DataInputStream(s.getInputStream());
                for (long[] r : ranges) {
                    byte[] got = new byte[(int) r[1]];
                    in.readFully(got);
                    byte[] want = new byte[(int) r[1]];
                    RawMemory.copy(m.address() + r[0], want, 0, want.length);
                    assertArrayEquals(want, got, "range at " + r[0]);
                }
                assertEquals(-1, in.read(), "nothing more than the ranges");
            } finally {
                server.close().sync();
            }
            assertEquals(ranges.length, sent.size());
            for (Object b : sent) {
                if (b instanceof ByteBuf whole) {
                    assertEquals(0, whole.refCnt(), "the transport released every range once written");
                } else {
                    RangeSource.Pieces p = (RangeSource.Pieces) b;
                    assertTrue(p.isEndOfInput(), "every piece was read");
                    assertEquals(p.length(), p.progress());
                }
            }
            for (long i = 0; i < size; i += 4093) { // the memory is still the owner's, mapped and unchanged
                assertEquals((byte) (i * 31 + (i >> 12)), RawMemory.getByte(m.address() + i));
            }
        } finally {
            loop.shutdownGracefully(0, 0, TimeUnit.MILLISECONDS).sync();
        }
    }
}
