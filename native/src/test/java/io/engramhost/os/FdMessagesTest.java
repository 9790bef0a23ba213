package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.internal.LibCHolder;
import io.engramhost.testing.NoLeaks;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(30)
@NoLeaks
class FdMessagesTest {
    private static final jnr.ffi.Pointer MEM = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);

    @Test
    void shouldPassMoreFdsThanOneSendmsgCarries() {
        int count = 2 * FdMessages.MAX_FDS_PER_SENDMSG + 11;
        UnixConnection[] pair = UnixConnection.pair("test");
        List<Fd> sent = new ArrayList<>();
        try (UnixConnection a = pair[0]; UnixConnection b = pair[1]) {
            for (int i = 0; i < count; i++) {
                Fd fd = Posix.memfdCreate("m" + i, 0);
                Posix.ftruncate(fd, 4096);
                try (Mapping m = Posix.mmap(4096, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
                    MEM.putInt(m.address(), i);
                }
                sent.add(fd);
            }
            a.send(ByteBuffer.wrap("hello".getBytes(StandardCharsets.UTF_8)), sent);
            FdMessages.Received r = b.receive(1 << 20, 4096, 5000);
            assertEquals("hello", StandardCharsets.UTF_8.decode(r.payload()).toString());
            assertEquals(count, r.fds().size());
            for (int i = 0; i < count; i++) {
                try (Fd fd = r.fds().get(i); Mapping m = Posix.mmap(4096, Posix.PROT_READ, Posix.MAP_SHARED, fd, 0)) {
                    assertTrue(Posix.isCloexec(fd));
                    assertEquals(i, MEM.getInt(m.address()), "fd " + i + " arrived in order");
                }
            }
        } finally {
            sent.forEach(Fd::close);
        }
    }

    @Test
    void shouldReportPeerClosedAndTimeout() {
        UnixConnection[] pair = UnixConnection.pair("test");
        try (UnixConnection a = pair[0]; UnixConnection b = pair[1]) {
            ReceiveTimeoutException t = assertThrows(ReceiveTimeoutException.class, () -> b.receive(64, 0, 100));
            assertTrue(t.getMessage().startsWith("timed out waiting for test[1]"), t.getMessage());
            a.close();
            PeerClosedException e = assertThrows(PeerClosedException.class, () -> b.receive(64, 0, 1000));
            assertEquals("connection closed by test[1]", e.getMessage());
        }
    }

    @Test
    void shouldRejectOversizedMessage() {
        UnixConnection[] pair = UnixConnection.pair("test");
        try (UnixConnection a = pair[0]; UnixConnection b = pair[1]) {
            a.send(ByteBuffer.allocate(100), List.of());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> b.receive(64, 0, 1000));
            assertTrue(e.getMessage().contains("announces 100 payload bytes; at most 64"), e.getMessage());
        }
    }

    @Test
    void shouldReportPeerCredentials() {
        UnixConnection[] pair = UnixConnection.pair("test");
        try (UnixConnection a = pair[0]; UnixConnection b = pair[1]) {
            PeerCredentials c = b.peerCredentials();
            assertEquals(Posix.getpid(), c.pid());
            assertEquals(Posix.getuid(), c.uid());
        }
    }
}
