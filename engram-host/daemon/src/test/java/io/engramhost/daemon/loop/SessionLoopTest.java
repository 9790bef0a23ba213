package io.engramhost.daemon.loop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.FdMessages;
import io.engramhost.os.NonBlocking;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixListener;
import io.engramhost.protocol.ConnectionPhase;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.FrameReader;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.MessageType;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.AbstractExecutorService;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The session loop driven round by round ({@link SessionLoop#runOnce}) over a fake clock, as Aeron's conductor tests
 * drive theirs: real sockets and a real poll, but time moves only when the test says, so deadlines, eviction and the
 * handover's freeze are checked at their exact edges without sleeping. Requests are answered inline by a stand-in
 * handler (HELLO with an empty WELCOME-typed frame, IMPORT with a lease).
 */
@Timeout(30)
class SessionLoopTest {
    private static final long MS = 1_000_000L;
    /** Request memory at its floor: one largest request at a time. */
    private static final ConnectionLimits LIMITS = new ConnectionLimits(3, 3, 1000, 2000, 60_000,
            io.engramhost.protocol.ProtocolDescriptor.MAX_REQUEST, 1);

    @TempDir
    Path dir;
    private final AtomicLong now = new AtomicLong(1_000_000_000L);
    private final List<Throwable> fatal = new ArrayList<>();
    private final List<String> detached = new ArrayList<>();
    private final List<UnixConnection> clients = new ArrayList<>();
    private Services services;
    private UnixListener listener;
    private SessionLoop loop;

    /** Runs every task on the caller's thread: a request is answered within the round that completes it. */
    private static final class Inline extends AbstractExecutorService {
        private volatile boolean shut;

        @Override
        public void execute(Runnable r) {
            r.run();
        }

        @Override
        public void shutdown() {
            shut = true;
        }

        @Override
        public List<Runnable> shutdownNow() {
            shut = true;
            return List.of();
        }

        @Override
        public boolean isShutdown() {
            return shut;
        }

        @Override
        public boolean isTerminated() {
            return shut;
        }

        @Override
        public boolean awaitTermination(long timeout, TimeUnit unit) {
            return true;
        }
    }

    private static Answer answer(ConnectionPhase phase, int version) {
        return switch (phase) {
            case HELLO -> Answer.of(Outbound.frame(Frames.empty(MessageType.WELCOME, 2), 2), Answer.Next.SESSION, 2);
            default -> Answer.of(Outbound.frame(Frames.empty(MessageType.MANIFEST, version), version), Answer.Next.LEASE,
                    version);
        };
    }

    @BeforeEach
    void start() {
        services = new Services(uid -> true, uid -> true, new Leases(), new ConnectionStats(), (task, name) -> {
            Thread t = new Thread(task, name);
            t.setDaemon(true);
            return t;
        }, (t, e) -> fatal.add(e), now::get);
        listener = UnixListener.bind(dir.resolve("loop.sock"), 64);
        loop = new SessionLoop(services, LIMITS, listener.fd(), "loop.sock",
                (phase, version, peer, payload) -> answer(phase, version), new SessionLoop.Detach() {
                    @Override
                    public void detached(io.engramhost.os.Fd fd, io.engramhost.os.PeerCredentials peer) {
                        detached.add("pid " + peer.pid());
                        fd.close();
                    }

                    @Override
                    public void abandoned() {
                        detached.add("abandoned");
                    }
                }, new Inline());
    }

    @AfterEach
    void stop() {
        loop.close();
        listener.close();
        clients.forEach(UnixConnection::close);
        assertEquals(List.of(), fatal, "no thread died");
    }

    /** A few rounds without waiting: what the sockets hold now is read, answered and written. */
    private void rounds() {
        for (int i = 0; i < 4; i++) {
            loop.runOnce(0);
        }
    }

    private void advance(long millis) {
        now.addAndGet(millis * MS);
    }

    private UnixConnection connect() {
        UnixConnection c = UnixConnection.connect(dir.resolve("loop.sock"));
        clients.add(c);
        rounds();
        return c;
    }

    private static void hello(UnixConnection c) {
        c.send(new Hello(1, 2, 1, "loop test").encode(), List.of());
    }

    private static MessageType nextType(UnixConnection c) {
        FdMessages.Received m = c.receive(1 << 20, 16, 2000);
        m.fds().forEach(io.engramhost.os.Fd::close);
        return FrameReader.of(m.payload()).type();
    }

    private static ErrorReply nextError(UnixConnection c) {
        FdMessages.Received m = c.receive(1 << 20, 0, 2000);
        FrameReader r = FrameReader.of(m.payload());
        assertEquals(MessageType.ERROR, r.type());
        return ErrorReply.decode(r);
    }

    /** Begins a message (its header announces 64 payload bytes) and sends 4 of them: a request under way. */
    private static void partial(UnixConnection c) {
        byte[] b = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(64).putInt(0).putInt(0x4d524745)
                .array();
        assertEquals(12, NonBlocking.send(c.rawFd(), new NonBlocking.Scratch(64), b, 0, b.length, new int[0]));
    }

    private static boolean closedByDaemon(UnixConnection c) {
        try {
            c.receive(1 << 20, 0, 2000);
            return false;
        } catch (PeerClosedException e) {
            return true;
        }
    }

    /** A session at rest: HELLO sent and answered. */
    private UnixConnection session() {
        UnixConnection c = connect();
        hello(c);
        rounds();
        assertEquals(MessageType.WELCOME, nextType(c));
        return c;
    }

    /** A lease: a session whose IMPORT was answered. */
    private UnixConnection lease() {
        UnixConnection c = session();
        c.send(Frames.empty(MessageType.IMPORT, 2), List.of());
        rounds();
        assertEquals(MessageType.MANIFEST, nextType(c));
        return c;
    }

    /** A loop like {@link #loop} over the same listener: the next daemon, which systemd's fd store hands it to. */
    private SessionLoop nextDaemon() {
        return new SessionLoop(services, LIMITS, listener.fd(), "loop.sock",
                (phase, version, peer, payload) -> answer(phase, version), new SessionLoop.Detach() {
                    @Override
                    public void detached(io.engramhost.os.Fd fd, io.engramhost.os.PeerCredentials peer) {
                        fd.close();
                    }

                    @Override
                    public void abandoned() {
                    }
                }, new Inline());
    }

    @Test
    void aLoopThatStoppedAcceptingLeavesNewClientsInTheBacklogForTheNextDaemonAndServesItsOwn() {
        UnixConnection old = session();
        UnixConnection held = lease();
        loop.stopAccepting();
        UnixConnection waiting = connect(); // connect(2) succeeds: the kernel queues it in the backlog
        hello(waiting);
        rounds();
        assertEquals(2, loop.connections().size(), "not accepted by the stopping loop");
        assertTrue(waiting.isOpen());
        old.send(Frames.empty(MessageType.IMPORT, 2), List.of());
        rounds();
        assertEquals(MessageType.MANIFEST, nextType(old), "what it accepted before is still served");
        assertTrue(held.isOpen());

        try (SessionLoop next = nextDaemon()) {
            for (int i = 0; i < 4; i++) {
                next.runOnce(0);
            }
            assertEquals(1, next.connections().size(), "the next daemon accepts the client that waited");
            assertEquals(MessageType.WELCOME, nextType(waiting), "and answers the HELLO it sent meanwhile");
            waiting.send(Frames.empty(MessageType.IMPORT, 2), List.of());
            for (int i = 0; i < 4; i++) {
                next.runOnce(0);
            }
            assertEquals(MessageType.MANIFEST, nextType(waiting));
        }
    }

    @Test
    void theHelloDeadlineFallsExactlyAtItsEdge() {
        UnixConnection c = connect();
        advance(LIMITS.helloTimeoutMillis() - 1);
        rounds();
        assertEquals(1, loop.connections().size(), "a millisecond early: still open");
        advance(1);
        rounds();
        ErrorReply e = nextError(c);
        assertEquals(ErrorCode.TIMED_OUT, e.code());
        assertTrue(e.message().startsWith("no complete HELLO within 1000 ms"), e.message());
        assertTrue(closedByDaemon(c));
        assertEquals(0, loop.connections().size());
        assertEquals(1, services.stats().timedOut.get());
    }

    @Test
    void aSessionIdlesOutButALeaseNever() {
        UnixConnection s = session();
        UnixConnection l = lease();
        advance(LIMITS.idleTimeoutMillis());
        rounds();
        assertEquals(ErrorCode.TIMED_OUT, nextError(s).code());
        assertEquals(1, loop.connections().size(), "the lease stays");
        assertEquals(ConnectionPhase.LEASE, loop.connections().get(0).phase);
        advance(10 * LIMITS.idleTimeoutMillis());
        rounds();
        assertEquals(1, loop.connections().size(), "a lease has no idle deadline");
        assertTrue(l.isOpen());
    }

    @Test
    void aRequestMustEndWithinItsDeadlineFromItsFirstByte() {
        UnixConnection c = session();
        advance(30_000); // idle, but within the idle deadline
        partial(c);
        rounds();
        advance(LIMITS.requestTimeoutMillis() - 1);
        rounds();
        assertEquals(1, loop.connections().size());
        advance(1);
        rounds();
        ErrorReply e = nextError(c);
        assertEquals(ErrorCode.TIMED_OUT, e.code());
        assertTrue(e.message().startsWith("a request not complete within 2000 ms of its first byte"), e.message());
    }

    @Test
    void evictionTakesTheOldestWithoutHelloThenTheOldestAtRestAndNeverALease() {
        UnixConnection lease = lease();
        UnixConnection restingOld = session();
        UnixConnection noHello = connect();
        UnixConnection fourth = connect(); // the cap is 3: the one without a HELLO goes, though it is the newest
        assertEquals(ErrorCode.BUSY, nextError(noHello).code());
        hello(fourth);
        rounds();
        nextType(fourth);
        UnixConnection fifth = connect(); // none without a HELLO now: the oldest session at rest goes, not the newer
        ErrorReply e = nextError(restingOld);
        assertEquals(ErrorCode.BUSY, e.code());
        assertTrue(e.message().contains("this connection was the oldest at rest"), e.message());
        assertEquals(3, loop.connections().size());
        hello(fifth);
        rounds();
        nextType(fifth);
        fourth.send(Frames.empty(MessageType.IMPORT, 2), List.of());
        fifth.send(Frames.empty(MessageType.IMPORT, 2), List.of());
        rounds();
        nextType(fourth);
        nextType(fifth);
        UnixConnection refused = connect(); // three leases: none may go
        ErrorReply busy = nextError(refused);
        assertEquals(ErrorCode.BUSY, busy.code());
        assertTrue(busy.message().contains("and none can be evicted"), busy.message());
        assertTrue(lease.isOpen());
        assertEquals(2, services.stats().evicted.get());
        assertEquals(1, services.stats().refusedBusy.get());
        assertEquals(3, services.leases().size());
    }

    @Test
    void theFreezeWaitsForWhatIsUnderWayThenClosesItAtTheDrainDeadline() throws Exception {
        UnixConnection quiet = session();
        UnixConnection busy = session();
        partial(busy);
        rounds();
        CompletableFuture<List<HandedConnection>> frozen = loop.freeze(500);
        rounds();
        assertFalse(frozen.isDone(), "a request under way holds the freeze");
        UnixConnection late = UnixConnection.connect(dir.resolve("loop.sock"));
        clients.add(late);
        rounds();
        assertEquals(2, loop.connections().size(), "nothing is accepted while draining");
        advance(500);
        rounds();
        assertTrue(frozen.isDone());
        ErrorReply e = nextError(busy);
        assertEquals(ErrorCode.TIMED_OUT, e.code());
        assertTrue(e.message().contains("handing over"), e.message());
        List<HandedConnection> handed = frozen.get();
        assertEquals(1, handed.size());
        assertEquals(ConnectionPhase.SESSION, handed.get(0).phase());
        advance(LIMITS.idleTimeoutMillis() * 2);
        rounds();
        assertEquals(1, loop.connections().size(), "frozen: no deadline fires");
        assertTrue(quiet.isOpen());
        loop.resume();
        rounds();
        assertEquals(ErrorCode.TIMED_OUT, nextError(quiet).code(), "serving again: its idle deadline had passed");
        assertEquals(1, loop.connections().size(), "the connection that waited in the backlog is accepted");
    }

    /** The header of the largest request and the first {@code bytes} of its payload (a valid IMPORT frame header). */
    private static byte[] largeStart(int bytes) {
        return ByteBuffer.allocate(8 + bytes).order(ByteOrder.LITTLE_ENDIAN)
                .putInt(io.engramhost.protocol.ProtocolDescriptor.MAX_REQUEST).putInt(0)
                .putInt(io.engramhost.protocol.ProtocolDescriptor.MAGIC).putShort((short) 2).putShort((short) 3).array();
    }

    /** Sends what the socket takes now of {@code b} from {@code at}; returns the new position. */
    private static int sendSome(UnixConnection c, byte[] b, int at, NonBlocking.Scratch scratch) {
        int n = NonBlocking.send(c.rawFd(), scratch, b, at, b.length - at, new int[0]);
        return n == NonBlocking.WOULD_BLOCK ? at : at + n;
    }

    @Test
    void aLargeRequestWaitsItsTurnAndIsWokenWhenAClosedOneGivesItsMemoryBack() {
        UnixConnection first = session();
        UnixConnection second = session();
        NonBlocking.Scratch scratch = new NonBlocking.Scratch(256 << 10);
        byte[] start = largeStart(8);
        assertEquals(start.length, sendSome(first, start, 0, scratch)); // admitted: the whole floor is its
        rounds();
        byte[] whole = new byte[8 + io.engramhost.protocol.ProtocolDescriptor.MAX_REQUEST];
        System.arraycopy(start, 0, whole, 0, start.length);
        int sent = sendSome(second, whole, 0, scratch);
        rounds();
        Connection waiting = loop.connections().get(1);
        assertTrue(waiting.starved, "the second waits in line, its bytes in the socket");
        assertEquals(io.engramhost.protocol.ProtocolDescriptor.MAX_REQUEST, loop.requestMemoryUsed(),
                "the first holds the floor, the second nothing");
        UnixConnection small = session(); // a small message never waits for the large pool
        assertTrue(small.isOpen());
        first.close();
        rounds();
        assertFalse(waiting.starved, "the close woke it");
        while (sent < whole.length) {
            sent = sendSome(second, whole, sent, scratch);
            loop.runOnce(0);
        }
        rounds();
        assertEquals(MessageType.MANIFEST, nextType(second), "its turn came: answered");
        assertEquals(0, loop.requestMemoryUsed(), "and it gave the memory back");
    }
}
