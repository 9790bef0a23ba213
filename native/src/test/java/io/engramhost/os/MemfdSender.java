package io.engramhost.os;

import io.engramhost.os.internal.LibCHolder;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;

/**
 * The sending side of {@link FdPassingProcessTest}, run as its own JVM: creates a memfd, writes a
 * pattern into it, and sends it with a payload to the socket given as the first argument.
 */
public final class MemfdSender {
    private MemfdSender() {
    }

    public static void main(String[] args) {
        Path socket = Path.of(args[0]);
        long size = Long.parseLong(args[1]);
        jnr.ffi.Pointer mem = jnr.ffi.Pointer.wrap(LibCHolder.RUNTIME, 0L);
        try (Fd fd = Posix.memfdCreate("sent", Posix.MFD_ALLOW_SEALING);
                UnixConnection c = UnixConnection.connect(socket)) {
            Posix.ftruncate(fd, size);
            try (Mapping m = Posix.mmap(size, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0)) {
                for (long off = 0; off < size; off += 8) {
                    mem.putLong(m.address() + off, off * 0x9E3779B97F4A7C15L);
                }
            }
            c.send(ByteBuffer.wrap(("pid " + ProcessHandle.current().pid()).getBytes(StandardCharsets.UTF_8)), List.of(fd));
            c.receive(16, 0, 30_000); // wait for the receiver's answer before closing
        }
    }
}
