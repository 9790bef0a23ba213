package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.FrameReader;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Request memory is fair (docs/protocol.md, "Request memory"), shown against a real daemon process: large senders,
 * fast or slow, as many as the guarantee names (8 at the floor of --request-memory, 32 at its default), delay a small
 * request (a new connection's HELLO and STATUS) by at most 100 ms; and 8 legitimate clients sending the largest
 * expectation at full speed all get their answers within the request timeout, whatever the memory.
 */
@Timeout(300)
class FairnessProcessTest {
    /** The most a small request may be delayed by large senders: the guarantee of docs/protocol.md. */
    private static final long DELAY_BOUND_MILLIS = 100;

    /** Connect, HELLO, STATUS: a small request's round trip, in ms. */
    private static double smallRequestMillis(Path socket) throws Exception {
        long t0 = System.nanoTime();
        try (RawPeer p = RawPeer.connect(socket)) {
            p.hello("fairness probe");
            p.sendFrame(io.engramhost.protocol.Frames.empty(MessageType.STATUS, 2));
            assertEquals(MessageType.STATUS_REPLY, FrameReader.of(p.readMessage()).type());
        }
        return (System.nanoTime() - t0) / 1e6;
    }

    private static double[] probe(Path socket, int n) throws Exception {
        double[] ms = new double[n];
        for (int i = 0; i < n; i++) {
            ms[i] = smallRequestMillis(socket);
        }
        Arrays.sort(ms);
        return ms;
    }

    /**
     * {@code n} peers that each send the largest request there is, its header and first {@code bytes} bytes of its
     * payload, then hold on: they keep what they are admitted to (or their turn in line) until they are closed.
     */
    private static List<RawPeer> largeSenders(Path socket, int n, int bytes) throws Exception {
        List<RawPeer> out = new ArrayList<>();
        int length = ProtocolDescriptor.MAX_REQUEST;
        byte[] head = ByteBuffer.allocate(8 + Math.max(bytes, 8)).order(ByteOrder.LITTLE_ENDIAN).putInt(length)
                .putInt(0).putInt(ProtocolDescriptor.MAGIC).putShort((short) 2).putShort((short) 3).array();
        for (int i = 0; i < n; i++) {
            RawPeer p = RawPeer.connect(socket);
            out.add(p);
            p.hello("large sender " + i);
            p.channel.configureBlocking(false); // what the socket takes now; a sender in line has its bytes wait there
            p.channel.write(ByteBuffer.wrap(head));
        }
        return out;
    }

    private void smallRequestsStayFastBeside(int senders, long requestMemory, Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 64,
                32, 1));
        Path socket = dir.resolve("run/f.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString(),
                "--request-memory", Long.toString(requestMemory), "--max-connections-per-uid", "4096")
                .awaitReady()) {
            probe(socket, 20); // warm both sides
            double[] idle = probe(socket, 40);
            List<RawPeer> fast = largeSenders(socket, senders / 2, 4 << 20); // 4 MiB of each, then a stall
            List<RawPeer> slow = largeSenders(socket, senders - senders / 2, 8); // a trickle: the frame header only
            try {
                double[] busy = probe(socket, 40);
                double idleMedian = idle[idle.length / 2];
                double busyMax = busy[busy.length - 1];
                System.out.printf("%d large senders, --request-memory %d: small request idle median %.2f ms (max %.2f),"
                        + " beside them median %.2f ms, max %.2f ms; load average %s%n", senders, requestMemory,
                        idleMedian, idle[idle.length - 1], busy[busy.length / 2], busyMax, loadAverage());
                assertTrue(busy[busy.length / 2] - idleMedian <= DELAY_BOUND_MILLIS && busyMax <= idle[idle.length - 1]
                        + DELAY_BOUND_MILLIS, "a small request delayed by more than " + DELAY_BOUND_MILLIS + " ms: "
                        + Arrays.toString(busy) + " against " + Arrays.toString(idle));
            } finally {
                for (RawPeer p : fast) {
                    p.close();
                }
                for (RawPeer p : slow) {
                    p.close();
                }
            }
            assertTrue(d.process.isAlive(), d.log());
        }
    }

    private static String loadAverage() throws Exception {
        return java.nio.file.Files.readString(Path.of("/proc/loadavg")).strip();
    }

    @Test
    void eightLargeSendersAtTheFloorDelayASmallRequestByAtMost100Ms(@TempDir Path dir) throws Exception {
        smallRequestsStayFastBeside(8, ProtocolDescriptor.MAX_REQUEST, dir);
    }

    @Test
    void thirtyTwoLargeSendersAtTheDefaultDelayASmallRequestByAtMost100Ms(@TempDir Path dir) throws Exception {
        smallRequestsStayFastBeside(32, ConnectionLimits.DEFAULT_REQUEST_MEMORY, dir);
    }

    /** At the floor only one fits at a time: the others wait their turn in line and none times out. */
    @Test
    void eightLegitimateLargestExpectationsAllGetTheirAnswers(@TempDir Path dir) throws Exception {
        Path ckpt = LimitsProcessTest.fingerprintOf(dir, 16 << 20);
        byte[] expected = Fingerprint.of(Checkpoint.open(ckpt), List.of(), "memfd", Fingerprint.LAYOUT_VERSION)
                .canonicalBytes();
        assertTrue(new ImportRequest(0, -1, Expectation.structured(expected)).encode(2).remaining() + 8
                <= ProtocolDescriptor.MAX_REQUEST + 8, "the largest request there is");
        Path socket = dir.resolve("run/l.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", ckpt.toString(),
                "--request-memory", Integer.toString(ProtocolDescriptor.MAX_REQUEST)).awaitReady()) {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                List<Future<Double>> all = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    all.add(pool.submit(() -> {
                        long t0 = System.nanoTime();
                        try (ImportedTables t = EngramClient.connect(socket, Expectation.structured(expected),
                                ClientOptions.defaults())) {
                            assertEquals(4164, t.tables().size());
                        }
                        return (System.nanoTime() - t0) / 1e6;
                    }));
                }
                double slowest = 0;
                for (Future<Double> f : all) {
                    slowest = Math.max(slowest, f.get(60, TimeUnit.SECONDS));
                }
                System.out.printf("8 imports with the largest expectation at --request-memory %d: slowest %.0f ms%n",
                        ProtocolDescriptor.MAX_REQUEST, slowest);
                assertTrue(slowest < ConnectionLimits.DEFAULT_REQUEST_TIMEOUT_MILLIS, "within the request timeout");
            } finally {
                pool.shutdownNow();
            }
            assertTrue(d.process.isAlive(), d.log());
            assertTrue(!d.log().contains("TIMED_OUT") && !d.log().contains("timed out"), d.log());
        }
    }
}
