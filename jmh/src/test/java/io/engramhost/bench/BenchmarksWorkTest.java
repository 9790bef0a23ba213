package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.memfd.PageKind;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Each benchmark's setup, measured methods and teardown called directly (no JMH): they do the work they
 * claim, agree with their baselines, and leave no fd behind.
 */
@Timeout(60)
class BenchmarksWorkTest {
    @Test
    void shouldImportTheTablesTheBaselineSendsAsFds() throws Exception {
        handshakeOnce(); // first use opens what the JVM keeps: /dev/urandom for SHA-256, jars
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        int ownedBefore = Fd.openCount();
        java.util.Set<String> before = fdTargets();
        handshakeOnce();
        java.util.Set<String> after = fdTargets();
        after.removeAll(before);
        assertEquals(ownedBefore, Fd.openCount(), "owned fds");
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds(), "open fds: " + after);
    }

    private static void handshakeOnce() throws Exception {
        HandshakeBench b = new HandshakeBench();
        b.tables = 300; // more than one sendmsg's worth of fds
        b.rows = 16;
        b.setUp();
        HandshakeBench.Lease lease = new HandshakeBench.Lease();
        assertEquals(300, b.clientConnect(lease));
        assertEquals(300, b.clientConnect(lease));
        lease.closeAll();
        lease.stop();
        assertEquals(300, b.clientConnectClose());
        assertEquals(300, b.socketpairFds());
        assertEquals(300, b.socketpairFdsMap());
        b.tearDown();
    }

    static java.util.Set<String> fdTargets() throws Exception {
        java.util.Set<String> s = new java.util.TreeSet<>();
        try (var l = java.nio.file.Files.list(java.nio.file.Path.of("/proc/self/fd"))) {
            for (var p : l.toList()) {
                try {
                    s.add(p.getFileName() + "->" + java.nio.file.Files.readSymbolicLink(p));
                } catch (Exception e) {
                    // gone
                }
            }
        }
        return s;
    }

    @Test
    void shouldGatherTheSameBytesOnEveryPath() {
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        GatherBench b = new GatherBench();
        b.rowBytes = 264;
        b.tableMiB = 2;
        b.batch = 64;
        b.setUp(); // checks all paths against the baseline itself
        byte[] base = b.unsafeCopy().clone();
        for (int i = 1; i < GatherBench.BATCHES; i++) {
            b.unsafeCopy();
        }
        assertArrayEquals(base, b.tableViewReadRows(), "the batches cycle, so the first comes round again");
        b.tearDown();
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    @Test
    void shouldLoadTheWholeCheckpointOnEveryPath() throws Exception {
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        ColdLoadBench b = new ColdLoadBench();
        b.threads = 2;
        b.checkpointMiB = 3;
        b.cache = "warm";
        b.setUp();
        long ours = b.loaderIntoMemfd();
        b.freeLoaded();
        long memfd = b.preadIntoMemfd();
        b.freeLoaded();
        assertEquals(ours, b.loaderIntoPopulatedMemfd());
        b.freeLoaded();
        assertEquals(ours, b.pwriteIntoMemfd());
        b.freeLoaded();
        long rows = (3L << 20) / 264;
        assertEquals(PageKind.SMALL.roundUp(rows * 256) + PageKind.SMALL.roundUp(rows * 8), b.memfdAllocateSeal(),
                "weight and scale, each in whole pages");
        b.freeLoaded();
        assertEquals(ours, b.anonymousAllocate());
        b.freeLoaded();
        long anonymous = b.preadIntoAnonymous();
        b.freeLoaded();
        assertEquals(rows * 264, ours);
        assertEquals(ours, memfd);
        assertEquals(ours, anonymous);
        b.tearDown();
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    @Test
    void shouldReadTheCheckpointFromTheDiskWithACold() throws Exception {
        java.nio.file.Path tmp = java.nio.file.Files.createDirectories(
                java.nio.file.Path.of(System.getProperty("java.io.tmpdir"))); // surefire's: target/tmp, maybe not yet made
        org.junit.jupiter.api.Assumptions.assumeFalse(java.nio.file.Files.getFileStore(tmp).type().equals("tmpfs"),
                "java.io.tmpdir is on tmpfs: its pages cannot leave the page cache");
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        ColdLoadBench b = new ColdLoadBench();
        b.threads = 2;
        b.checkpointMiB = 3;
        b.cache = "cold";
        b.setUp(); // drops the cache and checks with mincore that nothing stayed
        long rows = (3L << 20) / 264;
        for (int i = 0; i < 2; i++) {
            b.dropCache();
            assertEquals(rows * 264, b.loaderIntoMemfd());
            b.freeLoaded();
            b.dropCache();
            assertEquals(rows * 264, b.preadIntoAnonymous());
            b.freeLoaded();
        }
        b.tearDown();
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    @Test
    void shouldReadTheWholeCheckpointOnEveryColdStartPath() throws Exception {
        int fdsBefore = io.engramhost.os.ProcessProbe.countOpenFds();
        for (String method : java.util.List.of("readIntoRegions", "preadIntoAnonymous", "directRead", "ddDirect", "memcpy")) {
            ColdStartBench b = new ColdStartBench();
            ColdStartBench.Regions regions = new ColdStartBench.Regions();
            regions.backend = "memfd";
            b.threads = 2;
            b.checkpointMiB = 3;
            b.cache = "warm";
            b.setUp(method);
            long total = 0;
            long digests = 0;
            for (io.engramhost.checkpoint.TensorInfo t : b.tensors()) {
                total += t.length();
                digests += io.engramhost.checkpoint.ContentDigest.digest(t.file(), t.offset(), t.length());
            }
            for (int shot = 0; shot < 2; shot++) {
                b.prepare();
                switch (method) {
                    case "readIntoRegions" -> {
                        regions.create(b);
                        assertEquals(digests, b.readIntoRegions(regions), "the daemon's digests");
                        regions.close();
                    }
                    case "preadIntoAnonymous" -> {
                        assertEquals(total, b.preadIntoAnonymous());
                        io.engramhost.checkpoint.TensorInfo first = b.tensors().get(0);
                        assertEquals(io.engramhost.checkpoint.ContentDigest.digest(first.file(), first.offset(),
                                first.length()), io.engramhost.checkpoint.ContentDigest.digest(b.target().address(),
                                first.length()), "the bytes of the file");
                    }
                    case "directRead" -> assertTrue(b.directRead() >= total);
                    case "ddDirect" -> assertEquals(0, b.ddDirect());
                    default -> assertEquals(total, b.memcpy());
                }
                b.release();
            }
            b.tearDown();
        }
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.countOpenFds());
    }

    @Test
    void shouldRefuseAnUnknownCacheState() {
        ColdLoadBench b = new ColdLoadBench();
        b.threads = 1;
        b.checkpointMiB = 1;
        b.cache = "lukewarm";
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                b::setUp);
        assertEquals("cache: 'lukewarm' is not one of warm, cold", e.getMessage());
    }

    @Test
    void shouldMoveEveryByteOfTheSourceOnEachSeedTransport() throws Exception {
        int ownedBefore = Fd.openCount();
        java.util.List<String> fdsBefore = io.engramhost.os.ProcessProbe.openFds();
        SeedTransportBench b = new SeedTransportBench();
        b.streams = 2;
        b.totalMiB = 6;
        b.dest = "memfd"; // each transfer checked against the source (the smoke pass runs dest=buffer)
        b.range = 1 << 20; // three ranges a stream
        b.setUp();
        try {
            for (int i = 0; i < 3; i++) {
                b.makeTarget();
                long got = switch (i) {
                    case 0 -> b.nettyEpollSendfile();
                    case 1 -> b.grpc1MiB();
                    default -> b.grpc4MiB();
                };
                assertEquals(6L << 20, got, "transport " + i);
                b.checkTarget();
            }
        } finally {
            b.tearDown();
        }
        assertEquals(ownedBefore, Fd.openCount(), "owned fds");
        // gRPC's channels and their loops are closed when tearDown returns, not a second later (a shared group's
        // delayed release would close its fds inside the next test's count)
        assertEquals(fdsBefore, io.engramhost.os.ProcessProbe.openFds(), "the process's fds after tearDown");
    }
}
