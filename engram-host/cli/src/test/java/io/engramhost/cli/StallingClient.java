package io.engramhost.cli;

import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.ProtocolChannel;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;

/**
 * A misbehaving client process for robustness tests: it connects, says HELLO, then either sends half
 * a frame ({@code partial}) or asks for the tables and never reads them ({@code unread}), prints
 * "stalled" and waits to be killed.
 */
public final class StallingClient {
    private StallingClient() {
    }

    public static void main(String[] args) throws Exception {
        Path socket = Path.of(args[0]);
        String mode = args[1];
        UnixConnection c = UnixConnection.connect(socket);
        ProtocolChannel ch = new ProtocolChannel(c);
        ch.send(new Hello(1, 1, (int) ProcessHandle.current().pid(), "stalling").encode());
        ch.receive(0, 10_000).close();
        if (mode.equals("partial")) {
            // A message header announcing 1000 payload bytes, followed by only 10 of them.
            ByteBuffer b = ByteBuffer.allocate(18).order(ByteOrder.LITTLE_ENDIAN).putInt(1000).putInt(0);
            b.flip().limit(18);
            jnr.unixsocket.UnixSocketChannel.fromFD(c.rawFd()).write(b);
        } else {
            ch.send(new ImportRequest(0, -1, Expectation.any()).encode(1));
        }
        System.out.println("stalled");
        System.out.flush();
        Thread.sleep(600_000);
    }
}
