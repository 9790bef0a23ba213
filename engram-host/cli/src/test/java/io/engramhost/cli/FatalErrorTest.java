package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.SocketPaths;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A thread that dies of an error takes the daemon down cleanly: it exits with status 70, removes
 * its socket and ready file, and says so in one log line; it never stays alive but deaf. The error
 * here is a real one: a daemon given a heap too small for its --request-memory runs out of memory
 * while peers send the largest requests.
 */
@Timeout(120)
class FatalErrorTest {
    @Test
    void shouldExitCleanlyWhenAThreadDiesOfOutOfMemory(@TempDir Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0), 64, 64, 3));
        Path socket = dir.resolve("run/o.sock");
        byte[] blob = new byte[ProtocolDescriptor.MAX_FINGERPRINT];
        ByteBuffer big = RawPeer.message(new ImportRequest(0, -1, Expectation.structured(blob)).encode(2));
        try (DaemonProcess d = DaemonProcess.startWithJvmOptions(List.of("-Xmx40m"), socket, dir.resolve("d.log"),
                "--checkpoint", ckpt.toString()).awaitReady()) {
            List<RawPeer> peers = new ArrayList<>();
            try {
                for (int i = 0; i < 4 && d.process.isAlive(); i++) {
                    RawPeer p = RawPeer.connect(socket);
                    peers.add(p);
                    p.hello("heavy");
                    p.channel.configureBlocking(false);
                    ByteBuffer b = big.duplicate();
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                    while (b.hasRemaining() && d.process.isAlive() && System.nanoTime() < until) {
                        if (p.channel.write(b) == 0) {
                            Thread.sleep(2);
                        }
                    }
                }
            } catch (java.io.IOException gone) {
                // the daemon died under us: what the test waits for
            } finally {
                for (RawPeer p : peers) {
                    p.close();
                }
            }
            assertTrue(d.process.waitFor(60, TimeUnit.SECONDS), "the daemon exits: " + d.log());
            assertEquals(70, d.process.exitValue(), d.log());
            String log = d.log();
            assertEquals(1, log.split("fatal: thread ", -1).length - 1, "one fatal line: " + log);
            assertTrue(log.contains("OutOfMemoryError") && log.contains("exits with status 70"), log);
            assertFalse(Files.exists(socket), "socket removed");
            assertFalse(Files.exists(SocketPaths.readyFile(socket)), "ready file removed");
        }
    }
}
