package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.json.JsonReader;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.MessageType;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A few quiet peers must not stop the daemon serving (docs/protocol.md, "Deadlines and limits"):
 * with 1,000 idle, trickling or polling connections open, all from the engine's own uid, the median
 * of 5 imports stays within 50 ms of the undisturbed median. The daemon is a separate process; the
 * engine (EngramClient) and the peers are this JVM, over real sockets.
 */
@Timeout(240)
class AvailabilityTest {
    private static final int PEERS = 1000;
    private static final double MARGIN_MS = 50;

    @TempDir
    static Path dir;
    private static DaemonProcess daemon;
    private static double undisturbedMs;

    @BeforeAll
    static void start() throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1), 4096,
                256, 3));
        daemon = DaemonProcess.start(dir.resolve("run/a.sock"), dir.resolve("d.log"), "--checkpoint", ckpt.toString())
                .awaitReady();
        for (int i = 0; i < 5; i++) {
            importOnceMillis(); // warm both sides up
        }
        undisturbedMs = medianImportMillis();
    }

    @AfterAll
    static void stop() {
        if (daemon != null) {
            daemon.close();
        }
    }

    private static double importOnceMillis() {
        long t0 = System.nanoTime();
        try (ImportedTables t = EngramClient.connect(daemon.socket, Expectation.any(), ClientOptions.defaults())) {
            assertTrue(t.tables().size() > 0);
        }
        return (System.nanoTime() - t0) / 1e6;
    }

    private static double medianImportMillis() {
        double[] ms = new double[5];
        for (int i = 0; i < ms.length; i++) {
            ms[i] = importOnceMillis();
        }
        Arrays.sort(ms);
        return ms[2];
    }

    private static Map<String, Object> connections() throws Exception {
        String json = EngramClient.status(daemon.socket, ClientOptions.defaults());
        @SuppressWarnings("unchecked")
        Map<String, Object> c = (Map<String, Object>) ((Map<String, Object>) JsonReader.parse(json)).get("connections");
        return c;
    }

    private static long open() throws Exception {
        return ((Number) connections().get("open")).longValue();
    }

    private static void assertWithinMargin(String what) throws Exception {
        double disturbed = medianImportMillis();
        assertTrue(disturbed <= undisturbedMs + MARGIN_MS, what + ": median import " + disturbed + " ms against "
                + undisturbedMs + " ms undisturbed (margin " + MARGIN_MS + " ms)");
        System.out.printf("%s: median import %.2f ms, undisturbed %.2f ms%n", what, disturbed, undisturbedMs);
    }

    private static List<RawPeer> connectAll(int n) throws IOException {
        List<RawPeer> peers = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            peers.add(RawPeer.connect(daemon.socket));
        }
        return peers;
    }

    private static void closeAll(List<RawPeer> peers) throws IOException {
        for (RawPeer p : peers) {
            p.close();
        }
    }

    @Test
    void shouldServeImportsWithAThousandIdlePeers() throws Exception {
        List<RawPeer> peers = connectAll(PEERS);
        try {
            assertTrue(open() >= PEERS, "the daemon holds the idle peers: " + connections());
            assertWithinMargin(PEERS + " idle peers");
        } finally {
            closeAll(peers);
        }
    }

    @Test
    void shouldServeImportsWithAThousandSlowlorisPeers() throws Exception {
        List<RawPeer> peers = connectAll(PEERS);
        try {
            ByteBuffer hello = RawPeer.message(new io.engramhost.protocol.Hello(1, 2, 1, "slow").encode());
            for (RawPeer p : peers) {
                p.send(hello.duplicate().limit(5)); // half a header, then a byte now and then
            }
            for (int i = 0; i < PEERS; i += 3) {
                peers.get(i).send(hello.duplicate().position(5).limit(6));
            }
            assertTrue(open() >= PEERS, "the daemon holds the trickling peers: " + connections());
            assertWithinMargin(PEERS + " slowloris peers");
        } finally {
            closeAll(peers);
        }
    }

    @Test
    void shouldServeImportsWithAThousandStatusPollers() throws Exception {
        List<RawPeer> peers = connectAll(PEERS);
        AtomicBoolean polling = new AtomicBoolean(true);
        AtomicLong polls = new AtomicLong();
        Thread poller = new Thread(() -> {
            ByteBuffer status = RawPeer.message(Frames.empty(MessageType.STATUS, 2));
            while (polling.get()) {
                for (RawPeer p : peers) {
                    try {
                        p.send(status);
                        p.readMessage();
                        polls.incrementAndGet();
                    } catch (IOException e) {
                        throw new AssertionError("a poller lost its connection: " + e);
                    }
                    if (!polling.get()) {
                        return;
                    }
                }
            }
        }, "status-pollers");
        try {
            for (RawPeer p : peers) {
                p.hello("poller");
            }
            poller.start();
            while (polls.get() < PEERS) {
                Thread.sleep(10);
            }
            assertWithinMargin(PEERS + " status pollers");
        } finally {
            polling.set(false);
            poller.join(10_000);
            closeAll(peers);
        }
        assertTrue(polls.get() >= PEERS, "every poller was answered at least once: " + polls.get());
    }

    @Test
    void shouldEvictTheOldestPeerWithoutHelloAtThePerUidLimit(@TempDir Path tmp) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(tmp.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0), 64, 64, 5));
        try (DaemonProcess small = DaemonProcess.start(tmp.resolve("run/s.sock"), tmp.resolve("s.log"), "--checkpoint",
                ckpt.toString(), "--max-connections-per-uid", "16").awaitReady()) {
            List<RawPeer> idle = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                idle.add(RawPeer.connect(small.socket));
            }
            try (ImportedTables t = EngramClient.connect(small.socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(2, t.tables().size(), "an engine of the same uid is served at the limit");
                ErrorReply evicted = RawPeer.error(idle.get(0).readMessage());
                assertEquals(ErrorCode.BUSY, evicted.code());
                assertTrue(evicted.message().startsWith("evicted: uid ") && evicted.message().contains(
                        "--max-connections-per-uid") && evicted.message().contains("without a HELLO"), evicted.message());
                // 15 idle peers and the lease fill the 16 slots; nothing is evictable once they all hold leases
                List<ImportedTables> leases = new ArrayList<>();
                try {
                    closeAll(idle);
                    Thread.sleep(200);
                    for (int i = 0; i < 15; i++) {
                        leases.add(EngramClient.connect(small.socket, Expectation.any(), ClientOptions.defaults()));
                    }
                    try (RawPeer refused = RawPeer.connect(small.socket)) {
                        ErrorReply busy = RawPeer.error(refused.readMessage());
                        assertEquals(ErrorCode.BUSY, busy.code());
                        assertEquals("uid " + io.engramhost.os.Posix.getuid() + " has 16 connections open, the limit"
                                + " (--max-connections-per-uid 16), and none can be evicted", busy.message());
                    }
                } finally {
                    for (ImportedTables l : leases) {
                        l.close();
                    }
                }
            }
            String log = small.log();
            assertEquals(1, log.split("none can be evicted", -1).length - 1, "one log line per refused peer: " + log);
        }
    }
}
