package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.MessageType;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A seeded fuzzing pass against a daemon process: 10,000 generated cases of mutated valid frames,
 * truncations, lies in the lengths, junk and stray fds, over real sockets. Afterwards the daemon
 * serves, and its fds, threads and anonymous memory are back within stated bounds. The seed is
 * fixed (20261130) so CI replays the same cases; -Dengram.fuzz.seed=N runs others, and is printed.
 */
@Timeout(300)
class FuzzTest {
    private static final int CASES = 10_000;
    /** Threads the daemon may add over the run: its workers (4) and the JVM's own (GC, compiler). */
    private static final int THREAD_SLACK = 8;
    private static final long ANON_CEILING = 256L << 20;

    private static int threads(long pid) throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
            if (line.startsWith("Threads:")) {
                return Integer.parseInt(line.replaceAll("[^0-9]", ""));
            }
        }
        throw new AssertionError("no Threads in /proc/" + pid + "/status");
    }

    /** The valid frames mutations start from. */
    private static List<byte[]> seeds() {
        List<byte[]> s = new ArrayList<>();
        s.add(array(new Hello(1, 2, 1, "fuzz").encode()));
        s.add(array(new Hello(1, 1, 1, "fuzz-v1").encode()));
        s.add(array(new ImportRequest(0, -1, Expectation.any()).encode(2)));
        s.add(array(new ImportRequest(0, 0, Expectation.sha256("00".repeat(32))).encode(2)));
        s.add(array(new ImportRequest(0, -1, Expectation.structured(new byte[] {'E', 'G', 'F', 'P', 1, 0, 0, 0}))
                .encode(2)));
        s.add(array(Frames.empty(MessageType.STATUS, 2)));
        s.add(array(Frames.empty(MessageType.BYE, 2)));
        return s;
    }

    private static byte[] array(ByteBuffer b) {
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return a;
    }

    /** One case's bytes: an optional valid HELLO, then a mutated message. */
    private static byte[] generate(Random rnd, List<byte[]> seeds) {
        byte[] frame = seeds.get(rnd.nextInt(seeds.size())).clone();
        int mutations = rnd.nextInt(4);
        for (int m = 0; m < mutations && frame.length > 0; m++) {
            switch (rnd.nextInt(6)) {
                case 0 -> frame[rnd.nextInt(frame.length)] ^= (byte) (1 << rnd.nextInt(8)); // flip a bit
                case 1 -> frame[rnd.nextInt(frame.length)] = (byte) rnd.nextInt(256); // a random byte
                case 2 -> frame = java.util.Arrays.copyOf(frame, rnd.nextInt(frame.length + 1)); // truncate
                case 3 -> { // trailing junk
                    byte[] junk = new byte[1 + rnd.nextInt(64)];
                    rnd.nextBytes(junk);
                    byte[] f = java.util.Arrays.copyOf(frame, frame.length + junk.length);
                    System.arraycopy(junk, 0, f, frame.length, junk.length);
                    frame = f;
                }
                case 4 -> { // a huge count or length somewhere in the body
                    if (frame.length >= 12) {
                        ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN).putInt(8 + rnd.nextInt(frame.length - 11),
                                rnd.nextBoolean() ? -1 : rnd.nextInt());
                    }
                }
                default -> { // another type code
                    if (frame.length >= 8) {
                        ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) rnd.nextInt(40));
                    }
                }
            }
        }
        if (frame.length >= 8 && (ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN).getShort(6) & 0x7fff)
                == MessageType.STOP.code()) {
            frame[6] = (byte) MessageType.STOP_ACK.code(); // a valid STOP from root would end the run, not test it
        }
        int announced = frame.length;
        switch (rnd.nextInt(5)) {
            case 0 -> announced = rnd.nextInt(frame.length + 1); // says less than it sends
            case 1 -> announced = frame.length + 1 + rnd.nextInt(1 << 20); // says more, then hangs up
            case 2 -> announced = rnd.nextBoolean() ? -1 : rnd.nextInt(); // nonsense
            default -> { }
        }
        ByteBuffer m = ByteBuffer.allocate(8 + frame.length).order(ByteOrder.LITTLE_ENDIAN);
        m.putInt(announced).putInt(rnd.nextInt(20) == 0 ? rnd.nextInt() : 0).put(frame);
        byte[] message = m.array();
        if (rnd.nextInt(3) == 0) {
            return message; // no HELLO first
        }
        byte[] hello = array(RawPeer.message(new Hello(1, 2, 1, "fuzz").encode()));
        byte[] out = java.util.Arrays.copyOf(hello, hello.length + message.length);
        System.arraycopy(message, 0, out, hello.length, message.length);
        return out;
    }

    @Test
    void shouldSurviveTenThousandGeneratedCases(@TempDir Path dir) throws Exception {
        long seed = Long.getLong("engram.fuzz.seed", 20261130L);
        System.out.println("FuzzTest seed " + seed + " (replay: -Dengram.fuzz.seed=" + seed + ")");
        Random rnd = new Random(seed);
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1), 512,
                64, 11));
        try (DaemonProcess d = DaemonProcess.start(dir.resolve("run/f.sock"), dir.resolve("d.log"), "--checkpoint",
                ckpt.toString(), "--hello-timeout-ms", "1000", "--request-timeout-ms", "1000").awaitReady()) {
            try (ImportedTables t = EngramClient.connect(d.socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(4, t.tables().size(), "warm-up import");
            }
            Thread.sleep(300);
            int fdsBefore = d.openFds();
            int threadsBefore = threads(d.pid());
            List<byte[]> seeds = seeds();
            List<RawPeer> lingering = new ArrayList<>();
            int strayFdCases = 0;
            for (int i = 0; i < CASES; i++) {
                byte[] bytes = generate(rnd, seeds);
                if (rnd.nextInt(50) == 0) { // stray fds riding on the message
                    strayFdCases++;
                    try (UnixConnection c = UnixConnection.connect(d.socket);
                            Fd memfd = Posix.memfdCreate("fuzz", Posix.MFD_CLOEXEC)) {
                        c.send(ByteBuffer.wrap(bytes), List.of(memfd));
                    } catch (RuntimeException e) {
                        // the daemon may have hung up first
                    }
                    continue;
                }
                RawPeer p = RawPeer.connect(d.socket);
                try {
                    p.send(ByteBuffer.wrap(bytes));
                } catch (IOException e) {
                    // the daemon may have refused and closed already
                }
                if (rnd.nextInt(100) == 0 && lingering.size() < 64) {
                    lingering.add(p); // left open: a deadline must end it
                } else {
                    p.close();
                }
            }
            for (RawPeer p : lingering) {
                p.close();
            }
            assertTrue(d.process.isAlive(), "daemon alive after " + CASES + " cases: " + d.log());
            try (ImportedTables t = EngramClient.connect(d.socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(4, t.tables().size(), "the daemon serves after the fuzzing");
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            int fds = d.openFds();
            while (fds > fdsBefore && System.nanoTime() < deadline) {
                Thread.sleep(100);
                fds = d.openFds();
            }
            assertTrue(fds <= fdsBefore, "daemon fds back at " + fdsBefore + ", now " + fds);
            int threadsAfter = threads(d.pid());
            assertTrue(threadsAfter <= threadsBefore + THREAD_SLACK, "threads " + threadsBefore + " -> " + threadsAfter);
            long anon = MemoryCeilingTest.rssAnon(d.pid());
            assertTrue(anon <= ANON_CEILING, "anonymous RSS " + (anon >> 20) + " MiB");
            String status = EngramClient.status(d.socket, ClientOptions.defaults());
            System.out.printf("FuzzTest: %d cases (%d with stray fds), fds %d -> %d, threads %d -> %d, RssAnon %d MiB;"
                    + " %s%n", CASES, strayFdCases, fdsBefore, fds, threadsBefore, threadsAfter, anon >> 20,
                    status.substring(status.indexOf("\"connections\"")));
        }
    }
}
