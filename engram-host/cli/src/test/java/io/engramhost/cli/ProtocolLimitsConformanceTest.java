package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.protocol.ErrorCode;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * docs/protocol.md, "Deadlines and limits of a connection" and "The lease", against a daemon with
 * {@code --max-connections-per-uid 4}: BUSY when every slot is a lease (leases are never evicted),
 * eviction of the oldest connection without HELLO, else of the oldest session at rest; and a BYE that
 * ends a lease at once while other connections stall. Every test leaves the daemon with no connection
 * of its own (checked by the daemon's fd count).
 */
@Timeout(60)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ProtocolLimitsConformanceTest {
    static final int PER_UID = 4;
    static final int REQUEST_MS = 1000;
    /** The least --request-memory allows: one IMPORT of the largest size (16,842,752 bytes). */
    static final int REQUEST_MEMORY = 16_842_752;

    @TempDir
    static Path dir;
    static Path checkpoint;
    static ConformanceDaemon d;
    /** A daemon with the default limits, for the stalled connections, then STOP. */
    static ConformanceDaemon big;
    final List<RawClient> open = new ArrayList<>();
    int baselineFds;

    @BeforeAll
    static void startDaemon() throws Exception {
        checkpoint = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 300, 64, 5));
        d = ConformanceDaemon.launch(dir, "l", "--checkpoint", checkpoint.toString(), "--numa", "none",
                "--max-connections-per-uid", Integer.toString(PER_UID), "--request-timeout-ms",
                Integer.toString(REQUEST_MS), "--request-memory", Integer.toString(REQUEST_MEMORY));
        big = ConformanceDaemon.launch(dir, "s", "--checkpoint", checkpoint.toString(), "--numa", "none");
        d.ready();
        big.ready();
    }

    @AfterAll
    static void stopDaemons() {
        for (ConformanceDaemon x : new ConformanceDaemon[] {d, big}) {
            if (x != null) {
                x.close();
            }
        }
    }

    @BeforeEach
    void baseline() throws Exception {
        Thread.sleep(50);
        baselineFds = d.awaitFds(d.openFds());
    }

    @AfterEach
    void closeAll() throws Exception {
        open.forEach(RawClient::close);
        assertEquals(baselineFds, d.awaitFds(baselineFds), "every connection of the test closed by the daemon too");
    }

    RawClient connect(ConformanceDaemon daemon) throws Exception {
        RawClient c = RawClient.connect(daemon.socket);
        open.add(c);
        return c;
    }

    RawClient lease(ConformanceDaemon daemon) throws Exception {
        RawClient c = connect(daemon);
        c.handshake(2, 2);
        c.send(RawClient.importAny(2));
        assertEquals(4, c.nextFrame(5000).type(), "MANIFEST");
        return c;
    }

    static void assertNothingFor(RawClient c, int millis) throws Exception {
        assertThrows(TimeoutException.class, () -> c.next(millis), "no message, connection still open");
    }

    static long counter(Map<String, Object> status, String name) {
        return ((Number) ConformanceDaemon.object(status, "connections").get(name)).longValue();
    }

    @Test
    void whenEverySlotIsALeaseANewConnectionGetsBusyNamingTheLimit() throws Exception {
        List<RawClient> leases = new ArrayList<>();
        for (int i = 0; i < PER_UID; i++) {
            leases.add(lease(d));
        }
        RawClient fifth = connect(d);
        // Refused right after accept, before this client has sent anything: an ERROR encoded as version 1.
        fifth.assertErrorThenClosed(5000, ErrorCode.BUSY, 1, "--max-connections-per-uid", Integer.toString(PER_UID));
        for (RawClient l : leases) {
            assertNothingFor(l, 50); // leases are never evicted
        }
        leases.get(0).send(RawClient.empty(10, 2));
        leases.get(0).assertClosedWithNothingMore(2000);
        Thread.sleep(50);
        Map<String, Object> s = d.status();
        assertTrue(counter(s, "refused_busy") >= 1, "counted in STATUS: " + s.get("connections"));
        assertEquals(PER_UID - 1, ((List<?>) s.get("leases")).size());
    }

    @Test
    void aNewConnectionEvictsTheOldestConnectionWithoutHello() throws Exception {
        List<RawClient> silent = new ArrayList<>();
        for (int i = 0; i < PER_UID; i++) {
            silent.add(connect(d));
            Thread.sleep(20); // accept order is age order
        }
        RawClient fifth = connect(d);
        silent.get(0).assertErrorThenClosed(5000, ErrorCode.BUSY, 1, "evicted");
        RawClient.Message w = fifth.handshake(1, 2);
        assertEquals(2, w.version(), "the new connection is served");
        for (int i = 1; i < PER_UID; i++) {
            assertNothingFor(silent.get(i), 50);
        }
        open.forEach(RawClient::close);
        d.awaitFds(baselineFds);
        assertTrue(counter(d.status(), "evicted") >= 1);
    }

    @Test
    void failingThatItEvictsTheOldestSessionAtRest() throws Exception {
        List<RawClient> sessions = new ArrayList<>();
        for (int i = 0; i < PER_UID; i++) {
            RawClient c = connect(d);
            c.handshake(2, 2);
            sessions.add(c);
            Thread.sleep(20);
        }
        RawClient fifth = connect(d);
        sessions.get(0).assertErrorThenClosed(5000, ErrorCode.BUSY, 2, "evicted");
        assertEquals(2, fifth.handshake(1, 2).version(), "the new connection is served");
        for (int i = 1; i < PER_UID; i++) {
            assertNothingFor(sessions.get(i), 50);
        }
    }

    /**
     * "all connections together hold at most --request-memory bytes of unfinished payloads ... A connection
     * whose next bytes would exceed that waits, and its deadline keeps running."
     */
    @Test
    void aConnectionWaitingForRequestMemoryStillMeetsItsDeadline() throws Exception {
        RawClient hog = connect(d);
        hog.handshake(1, 2);
        byte[] head = RawClient.importAny(2);
        byte[] part = new byte[12 << 20]; // more than half: the hog's buffer grows to the whole announced length
        System.arraycopy(head, 0, part, 0, head.length);
        hog.write(RawClient.header(REQUEST_MEMORY, 0)).write(part);
        Thread.sleep(100);
        RawClient starved = connect(d);
        starved.handshake(1, 2);
        long t0 = System.nanoTime();
        starved.write(RawClient.header(100_000, 0)).write(java.util.Arrays.copyOf(head, 50_000));
        starved.assertErrorThenClosed(REQUEST_MS + 3000, ErrorCode.TIMED_OUT, 2, "request");
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(ms >= REQUEST_MS - 200 && ms < REQUEST_MS + 2000, "the waiting connection's deadline ran: " + ms);
        hog.assertErrorThenClosed(3000, ErrorCode.TIMED_OUT, 2, "request");
        // The memory is given back: a request of 10 MB goes through again (a structured expectation over 1 MiB:
        // a well-formed head, any backend, pattern "*", then files and tables unlike the daemon's: a mismatch).
        RawClient again = connect(d);
        again.handshake(1, 2);
        ByteBuffer big = ByteBuffer.allocate(10 << 20).order(ByteOrder.LITTLE_ENDIAN);
        big.put(new byte[] {'E', 'G', 'F', 'P'}).putShort((short) 1).putShort((short) 0)
                .putInt(io.engramhost.checkpoint.Fingerprint.LAYOUT_VERSION).putInt(0).putInt(1).putInt(1).put((byte) '*');
        again.send(new RawClient.Frame(3, 2).i32(0).i32(-1).u8(2).blob32(big.array()).bytes());
        RawClient.Joined answer = again.nextFrame(5000);
        assertEquals(ErrorCode.FINGERPRINT_MISMATCH, io.engramhost.protocol.ErrorReply.decode(answer.reader()).code());
        again.send(RawClient.empty(10, 2));
        again.assertClosedWithNothingMore(2000);
        Map<String, Object> s = d.status();
        assertTrue(counter(s, "request_memory_used") <= 8, "nothing but this STATUS's own 8 bytes: " + s.get("connections"));
    }

    @Test
    @Order(1)
    void aLeaseEndsAtOnceOnByeEvenWithThirtyConnectionsStalledMidHello() throws Exception {
        int bigBaseline = big.awaitFds(big.openFds());
        RawClient lease = lease(big);
        assertEquals(1, big.leases());
        List<RawClient> stalled = new ArrayList<>();
        byte[] hello = RawClient.message(RawClient.hello(1, 2, "stalled"));
        for (int i = 0; i < 30; i++) {
            RawClient c = connect(big);
            c.write(java.util.Arrays.copyOf(hello, 3 + i % 12)); // part of a header, or of the HELLO
            stalled.add(c);
        }
        lease.send(RawClient.empty(10, 2));
        long t0 = System.nanoTime();
        lease.assertClosedWithNothingMore(2000);
        int leases = big.leases();
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertEquals(0, leases, "STATUS no longer lists the lease");
        assertTrue(ms < 250, "the lease ended at once (this includes a STATUS round trip): " + ms + " ms");
        for (RawClient c : stalled) {
            assertNothingFor(c, 1); // still waiting on their HELLO deadline
        }
        open.forEach(RawClient::close);
        assertEquals(bigBaseline, big.awaitFds(bigBaseline));
    }

    /** STOP with a body is refused; STOP is acknowledged, then every lease ends and the socket and ready file go. */
    @Test
    @Order(2)
    void stopIsAcknowledgedThenLeasesEndAndTheFilesGo() throws Exception {
        RawClient lease = lease(big);
        RawClient bad = connect(big);
        bad.handshake(1, 2);
        bad.send(new RawClient.Frame(7, 2).u8(0).bytes());
        bad.assertErrorThenClosed(5000, ErrorCode.BAD_REQUEST, 2, "body");
        assertTrue(big.process.isAlive(), "a STOP with a body stops nothing");
        RawClient stop = connect(big);
        stop.handshake(1, 1);
        stop.send(RawClient.empty(7, 1));
        RawClient.Message ack = stop.next(5000);
        assertEquals(8, ack.type(), "STOP_ACK: " + ack);
        assertEquals(1, ack.version());
        assertEquals(8, ack.payloadLength(), "an empty body");
        stop.assertClosedWithNothingMore(5000);
        lease.assertClosedWithNothingMore(10_000); // the lease sees EOF
        assertTrue(big.process.waitFor(20, java.util.concurrent.TimeUnit.SECONDS), "the daemon ends");
        assertEquals(0, big.process.exitValue(), big.log());
        assertFalse(java.nio.file.Files.exists(big.socket), "socket removed");
        assertFalse(java.nio.file.Files.exists(io.engramhost.protocol.SocketPaths.readyFile(big.socket)),
                "ready file removed");
    }
}
