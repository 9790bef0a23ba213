package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.os.Fd;
import io.engramhost.os.JvmFlags;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** What a client's mistakes and crashes, and a daemon's death, do, with the daemon as a separate process. */
@Timeout(180)
class RobustnessTest {

    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 14), 3000, 256, 9));
    }

    private static int awaitFds(DaemonProcess d, int expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        int n = d.openFds();
        while (n != expected && System.nanoTime() < deadline) {
            Thread.sleep(50);
            n = d.openFds();
        }
        return n;
    }

    @Test
    void shouldKeepServingWithNoFdLeakWhenClientsAreKilledMidHandshake(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/k.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", checkpoint(dir).toString())
                .awaitReady()) {
            assertEquals(0, CliRun.of("import", "--socket", socket.toString()).exit(), "warm-up import");
            Thread.sleep(500); // the warm-up lease ends when that process exits
            int baseline = d.openFds();
            for (String mode : List.of("partial", "unread", "partial", "unread")) {
                List<String> cmd = new ArrayList<>();
                cmd.add(ProcessHandle.current().info().command().orElseThrow());
                cmd.addAll(JvmFlags.get());
                cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), StallingClient.class.getName(),
                        socket.toString(), mode));
                Process client = new ProcessBuilder(cmd).redirectErrorStream(true).start();
                BufferedReader out = new BufferedReader(new InputStreamReader(client.getInputStream(), StandardCharsets.UTF_8));
                assertEquals("stalled", out.readLine(), "client reached the stall (" + mode + ")");
                client.destroyForcibly().waitFor(); // SIGKILL
            }
            assertEquals(baseline, awaitFds(d, baseline), "daemon fds back at the baseline: " + d.log());
            CliRun again = CliRun.of("import", "--socket", socket.toString(), "--digest", "engram");
            assertEquals(0, again.exit(), again.err());
            assertTrue(d.process.isAlive());
        }
    }

    @Test
    void shouldNotLetAClientWriteOrResizeATable(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("run/w.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", checkpoint(dir).toString())
                .awaitReady(); ProtocolChannel ch = new ProtocolChannel(UnixConnection.connect(socket))) {
            ch.send(new Hello(1, 1, Posix.getpid(), "writer").encode());
            ch.receive(0, 10_000).close();
            ch.send(new ImportRequest(0, -1, Expectation.any()).encode(1));
            try (ProtocolChannel.Incoming in = ch.receive(ProtocolDescriptor.MAX_FDS, 10_000)) {
                assertEquals(MessageType.MANIFEST, in.type());
                Manifest m = Manifest.decode(in.reader());
                List<Fd> fds = in.takeFds();
                try {
                    for (int i = 0; i < fds.size(); i++) {
                        Fd fd = fds.get(i);
                        long size = m.regions().get(i).size();
                        assertEquals(MemfdRegion.SEALS, Posix.getSeals(fd) & MemfdRegion.SEALS);
                        NativeException w = assertThrows(NativeException.class, () -> Posix.mmap(size,
                                Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED, fd, 0));
                        assertEquals("EPERM", w.errnoName());
                        NativeException grow = assertThrows(NativeException.class, () -> Posix.ftruncate(fd, size * 2));
                        assertEquals("EPERM", grow.errnoName());
                        NativeException shrink = assertThrows(NativeException.class, () -> Posix.ftruncate(fd, 0));
                        assertEquals("EPERM", shrink.errnoName());
                    }
                } finally {
                    fds.forEach(Fd::close);
                }
            }
        }
    }

    @Test
    void shouldKeepReadingAfterTheDaemonIsKilledAndCallBack(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/g.sock");
        DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString()).awaitReady();
        try (d; ImportedTables tables = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
            CountDownLatch gone = new CountDownLatch(1);
            AtomicReference<String> reason = new AtomicReference<>();
            tables.onDaemonGone(r -> {
                reason.set(r);
                gone.countDown();
            });
            d.process.destroyForcibly().waitFor();
            assertTrue(gone.await(10, TimeUnit.SECONDS), "callback fired");
            assertTrue(reason.get().startsWith("the daemon"), reason.get());
            for (TensorInfo t : Checkpoint.open(List.of(ckpt)).tensors()) {
                assertEquals(DemoCommand.sha256(t), HexFormat.of().formatHex(tables.table(t.name()).sha256()),
                        t.name() + " still readable and intact");
            }
        }
    }
}
