package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.engramhost.os.internal.LibCHolder;
import io.engramhost.testing.ChildJvm;
import io.engramhost.testing.NoLeaks;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Two JVM processes: the child sends a memfd over a Unix socket; this one maps it and reads what it wrote. */
@Timeout(60)
@NoLeaks
class FdPassingProcessTest {
    @Test
    void shouldMapAMemfdSentByAnotherProcess(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("pass.sock");
        long size = 3 * 4096 + 4096;
        try (UnixListener listener = UnixListener.bind(socket, 4)) {
            Process sender = new ProcessBuilder(ChildJvm.command(MemfdSender.class, List.of(), socket.toString(),
                    Long.toString(size))).inheritIO().start();
            try (UnixConnection c = listener.accept(30_000)) {
                FdMessages.Received r = c.receive(64, 1, 30_000);
                assertEquals("pid " + sender.pid(), StandardCharsets.UTF_8.decode(r.payload()).toString());
                assertEquals(1, r.fds().size());
                jnr.ffi.Pointer mem = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);
                try (Fd fd = r.fds().get(0); Mapping m = Posix.mmap(size, Posix.PROT_READ, Posix.MAP_SHARED, fd, 0)) {
                    assertEquals(size, Posix.size(fd));
                    for (long off = 0; off < size; off += 8) {
                        assertEquals(off * 0x9E3779B97F4A7C15L, mem.getLong(m.address() + off), "word at " + off);
                    }
                }
                c.send(ByteBuffer.wrap(new byte[] {1}), List.of());
            }
            sender.waitFor(30, TimeUnit.SECONDS);
            assertEquals(0, sender.exitValue());
        }
    }
}
