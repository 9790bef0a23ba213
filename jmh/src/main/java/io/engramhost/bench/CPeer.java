package io.engramhost.bench;

import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.RegionKind;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The C client as a separate process, in the same run: {@code engram-attach --bench-peer}, a child process that
 * attaches the fds this JVM sends it with the same driver calls (the same C functions) as a protocol import does,
 * one request at a time over a Unix socket. {@link AttachBench} times only its {@link #ping()}, the round trip
 * ({@link AttachBench#cRoundTrip}); its C baseline of the attach runs in the benchmark's own process ({@link CAttach}),
 * so that no socket is timed with it. The child exits when this is closed.
 */
final class CPeer implements AutoCloseable {
    private static final int OP_CONTEXT = 1;
    private static final int OP_ATTACH = 2;
    private static final int OP_RELEASE = 3;
    private static final int OP_PING = 4;
    private static final int REPLY_TIMEOUT_MILLIS = 300_000;

    private final Path dir;
    private final Process process;
    private final UnixListener listener;
    private final UnixConnection connection;
    private boolean closed;

    private CPeer(Path dir, Process process, UnixListener listener, UnixConnection connection) {
        this.dir = dir;
        this.process = process;
        this.listener = listener;
        this.connection = connection;
    }

    /** Starts the peer for GPU {@code device} and waits for it to connect. */
    static CPeer start(int device) {
        Path binary = PeerClients.engramAttach();
        Path dir;
        try {
            dir = Files.createTempDirectory("engram-cpeer-");
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create a directory for the C peer's socket", e);
        }
        UnixListener listener = null;
        Process process = null;
        try {
            listener = UnixListener.bind(dir.resolve("peer.sock"), 1);
            process = new ProcessBuilder(binary.toString(), "--bench-peer", listener.path().toString(), "--device",
                    Integer.toString(device)).redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .redirectError(dir.resolve("peer.err").toFile()).start();
            UnixConnection c = null;
            for (int waited = 0; c == null && waited < 30_000 && process.isAlive(); waited += 100) {
                c = listener.accept(100);
            }
            if (c == null) {
                throw new IllegalStateException(binary + " --bench-peer did not connect within 30 s"
                        + (process.isAlive() ? "" : " (exited " + process.waitFor() + ")") + stderrOf(dir));
            }
            return new CPeer(dir, process, listener, c);
        } catch (IOException e) {
            cleanUp(dir, process, listener);
            throw new UncheckedIOException("cannot start " + binary + " --bench-peer", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            cleanUp(dir, process, listener);
            throw new IllegalStateException("interrupted while starting the C peer", e);
        } catch (RuntimeException e) {
            cleanUp(dir, process, listener);
            throw e;
        }
    }

    /** libcuda, cuInit and the primary context in the peer: done once, before any timed attach. */
    String context() {
        return request(OP_CONTEXT, 0, 0, 0, 0, List.of());
    }

    /** Attaches region {@code fd} (the peer gets its own copy) as a client attaches a region of {@code kind}. */
    String attach(RegionKind kind, Fd fd, long size, int node, int flags) {
        return request(OP_ATTACH, kind.code(), flags, node, size, List.of(fd));
    }

    /** Releases what the last attach attached and closes the peer's copy of the fd. */
    String release() {
        return request(OP_RELEASE, 0, 0, 0, 0, List.of());
    }

    /** One request and answer with nothing attached: the floor of every timed C attach. */
    String ping() {
        return request(OP_PING, 0, 0, 0, 0, List.of());
    }

    private String request(int op, int kind, int flags, int node, long size, List<Fd> fds) {
        ByteBuffer b = ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(op).putInt(kind).putInt(flags).putInt(node).putLong(size).flip();
        String reply;
        try {
            connection.send(b, fds);
            FdMessages.Received r = connection.receive(4096, 0, REPLY_TIMEOUT_MILLIS);
            reply = StandardCharsets.UTF_8.decode(r.payload()).toString();
        } catch (RuntimeException e) {
            throw new IllegalStateException("C peer (engram-attach --bench-peer), op " + op + ": " + e.getMessage()
                    + stderrOf(dir), e);
        }
        if (!reply.startsWith("{\"op\":")) {
            throw new IllegalStateException("C peer answered op " + op + " with '" + reply + "'");
        }
        return reply;
    }

    private static String stderrOf(Path dir) {
        try {
            String s = Files.readString(dir.resolve("peer.err")).strip();
            return s.isEmpty() ? "" : "; its stderr: " + s;
        } catch (IOException e) {
            return "";
        }
    }

    /** Ends the peer (EOF on its socket; it releases anything still attached and exits 0). */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        connection.shutdownOutput();
        try {
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("C peer did not exit within 30 s of its socket closing" + stderrOf(dir));
            }
            if (process.exitValue() != 0) {
                throw new IllegalStateException("C peer exited " + process.exitValue() + stderrOf(dir));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for the C peer", e);
        } finally {
            connection.close();
            cleanUp(dir, process, listener);
        }
    }

    private static void cleanUp(Path dir, Process process, UnixListener listener) {
        if (process != null) {
            process.destroyForcibly();
        }
        if (listener != null) {
            listener.close();
        }
        try {
            Files.deleteIfExists(dir.resolve("peer.sock"));
            Files.deleteIfExists(dir.resolve("peer.err"));
            Files.deleteIfExists(dir);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot remove " + dir, e);
        }
    }
}
