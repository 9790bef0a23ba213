package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.FrameWriter;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolDescriptor;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * No request may make the daemon allocate without bound: under streams of the largest requests, of
 * headers that announce them and of payloads left unfinished, the daemon's anonymous memory (its
 * tables are shared memory, not anonymous) stays at or below 256 MiB, and it serves afterwards. The
 * daemon is a separate process started as the launcher starts it (its bounded heap).
 */
@Timeout(300)
class MemoryCeilingTest {
    private static final long CEILING = 256L << 20;

    static long rssAnon(long pid) throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
            if (line.startsWith("RssAnon:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", "")) << 10;
            }
        }
        throw new AssertionError("no RssAnon in /proc/" + pid + "/status");
    }

    /** A valid structured fingerprint of about {@code bytes} bytes: many tables, none of them the daemon's. */
    static byte[] hugeExpectation(int bytes) {
        List<Fingerprint.Table> tables = new ArrayList<>();
        int perTable = 4 + 13 + 4 + 2 + 4 + 8 + 8;
        for (int i = 0; i < bytes / perTable; i++) {
            tables.add(new Fingerprint.Table(String.format("x.%010d", i), DType.U8, new long[] {8}, 8));
        }
        byte[] b = new Fingerprint(Fingerprint.LAYOUT_VERSION, "", List.of("*"), List.of(), tables).canonicalBytes();
        assertTrue(b.length <= ProtocolDescriptor.MAX_FINGERPRINT, "the expectation fits the limit: " + b.length);
        return b;
    }

    @Test
    void shouldStayUnderTheCeilingUnderLargeRequestStreams(@TempDir Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0, 1), 2048,
                256, 7));
        ByteBuffer bigImport = RawPeer.message(new ImportRequest(0, -1, Expectation.structured(
                hugeExpectation(ProtocolDescriptor.MAX_FINGERPRINT - 64))).encode(2));
        ByteBuffer detailedImport = RawPeer.message(new ImportRequest(0, -1, Expectation.structured(
                hugeExpectation((1 << 20) - 64))).encode(2));
        try (DaemonProcess d = DaemonProcess.start(dir.resolve("run/m.sock"), dir.resolve("d.log"), "--checkpoint",
                ckpt.toString()).awaitReady()) {
            long before = rssAnon(d.pid());
            long peak = before;
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                // 1. Eight clients at once, four rounds: IMPORTs with a 16 MiB structured expectation that
                //    differs from the daemon's fingerprint in every table.
                for (int round = 0; round < 4; round++) {
                    List<Future<ErrorReply>> replies = new ArrayList<>();
                    for (int i = 0; i < 8; i++) {
                        ByteBuffer request = i % 2 == 0 ? bigImport : detailedImport;
                        replies.add(pool.submit(() -> {
                            try (RawPeer p = RawPeer.connect(d.socket)) {
                                p.hello("big-expectation");
                                p.send(request);
                                return RawPeer.error(p.readMessage());
                            }
                        }));
                    }
                    for (int i = 0; i < replies.size(); i++) {
                        ErrorReply e;
                        try {
                            e = replies.get(i).get();
                        } catch (java.util.concurrent.ExecutionException x) {
                            throw new AssertionError("round " + round + ", client " + i + ": " + x.getCause() + "; daemon "
                                    + (d.process.isAlive() ? "alive" : "exited " + d.process.exitValue()) + ": " + d.log());
                        }
                        assertEquals(ErrorCode.FINGERPRINT_MISMATCH, e.code(), e.message());
                        if (i % 2 == 0) {
                            assertEquals(1, e.details().size(), "a 16 MiB expectation is compared whole");
                            assertTrue(e.details().get(0).contains("files or tables differ"), e.details().get(0));
                        } else {
                            assertEquals(ProtocolDescriptor.MAX_DETAILS, e.details().size(), "details are capped");
                            assertTrue(e.details().get(100).matches("\\.\\.\\. and \\d+ more differences"),
                                    e.details().get(100));
                        }
                    }
                    peak = Math.max(peak, rssAnon(d.pid()));
                }
                // 2. 300 connections that announce the largest IMPORT and send nothing more, and 8 that stop
                //    after 12 MiB of it: together they ask for far more than --request-memory.
                List<RawPeer> stalled = new ArrayList<>();
                try {
                    ByteBuffer header = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN)
                            .putInt(ProtocolDescriptor.MAX_REQUEST).putInt(0).flip();
                    for (int i = 0; i < 300; i++) {
                        RawPeer p = RawPeer.connect(d.socket);
                        stalled.add(p);
                        p.hello("header-only");
                        p.send(header);
                    }
                    List<Future<?>> writers = new ArrayList<>();
                    for (int i = 0; i < 8; i++) {
                        RawPeer p = RawPeer.connect(d.socket);
                        stalled.add(p);
                        p.hello("twelve-mib");
                        writers.add(pool.submit(() -> {
                            ByteBuffer part = bigImport.duplicate().limit(12 << 20);
                            p.channel.configureBlocking(false);
                            long until = System.nanoTime() + 3_000_000_000L;
                            while (part.hasRemaining() && System.nanoTime() < until) {
                                if (p.channel.write(part) == 0) {
                                    Thread.sleep(5); // the daemon stopped reading: its request memory is spent
                                }
                            }
                            return null;
                        }));
                    }
                    for (Future<?> w : writers) {
                        w.get();
                    }
                    Thread.sleep(500);
                    peak = Math.max(peak, rssAnon(d.pid()));
                    String status = EngramClient.status(d.socket, ClientOptions.defaults());
                    assertTrue(status.contains("\"request_memory_used\""), status);
                    // 3. While they stall, an engine is served.
                    try (ImportedTables t = EngramClient.connect(d.socket, Expectation.any(), ClientOptions.defaults())) {
                        assertEquals(4, t.tables().size());
                    }
                } finally {
                    for (RawPeer p : stalled) {
                        p.close();
                    }
                }
            } finally {
                pool.shutdownNow();
            }
            long after = rssAnon(d.pid());
            System.out.printf("daemon RssAnon: %d MiB at start, %d MiB peak, %d MiB after%n", before >> 20, peak >> 20,
                    after >> 20);
            assertTrue(peak <= CEILING, "peak anonymous RSS " + (peak >> 20) + " MiB exceeds 256 MiB: " + d.log());
            assertTrue(d.process.isAlive(), d.log());
            try (ImportedTables t = EngramClient.connect(d.socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(4, t.tables().size(), "served after the streams");
            }
        }
    }

    @Test
    void shouldRefuseAnOversizedHeaderBeforeReadingItsPayload(@TempDir Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(0), 64, 64, 7));
        try (DaemonProcess d = DaemonProcess.start(dir.resolve("run/h.sock"), dir.resolve("d.log"), "--checkpoint",
                ckpt.toString()).awaitReady();
                RawPeer before = RawPeer.connect(d.socket);
                RawPeer after = RawPeer.connect(d.socket)) {
            ByteBuffer tooBig = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN)
                    .putInt(ProtocolDescriptor.MAX_HELLO + 1).putInt(0).flip();
            before.send(tooBig);
            ErrorReply e = RawPeer.error(before.readMessage());
            assertEquals(ErrorCode.BAD_REQUEST, e.code());
            assertEquals("message announces 4115 payload bytes; at most 4114 are accepted here", e.message());
            after.hello("sized");
            after.send(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putInt(ProtocolDescriptor.MAX_REQUEST + 1)
                    .putInt(0).flip());
            e = RawPeer.error(after.readMessage());
            assertEquals(ErrorCode.BAD_REQUEST, e.code());
            assertEquals("message announces 16842753 payload bytes; at most 16842752 are accepted here", e.message());
            byte[] statusWithBody = new FrameWriter(MessageType.STATUS, 2).raw("x".getBytes(StandardCharsets.US_ASCII))
                    .toArray();
            try (RawPeer p = RawPeer.connect(d.socket)) {
                p.hello("status-body");
                p.sendFrame(ByteBuffer.wrap(statusWithBody));
                e = RawPeer.error(p.readMessage());
                assertEquals(ErrorCode.BAD_REQUEST, e.code());
                assertTrue(e.message().contains("empty body"), e.message());
            }
        }
    }
}
