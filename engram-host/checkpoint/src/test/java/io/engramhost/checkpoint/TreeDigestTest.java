package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * sha256-tree-v1 against vectors computed independently, once, with Python's hashlib:
 * <pre>
 * import hashlib, struct
 * C = 16 << 20
 * def tree(b):
 *     leaves = [hashlib.sha256(b[i:i+C]).digest() for i in range(0, len(b), C)]
 *     return hashlib.sha256(b"engram-sha256-tree-v1" + struct.pack("&lt;QQ", len(b), C) + b"".join(leaves)).hexdigest()
 * def pattern(n):
 *     return bytes(((i * 131) + (i &gt;&gt; 16)) &amp; 0xff for i in range(n))
 * print(tree(b""), tree(b"abc"))
 * big = pattern(40 &lt;&lt; 20)
 * for n in (C - 1, C, C + 1, 40 &lt;&lt; 20): print(n, tree(big[:n]))
 * </pre>
 */
@Timeout(120)
class TreeDigestTest {
    static final String EMPTY = "0c4278d99b29da1ade86fade7817d53950883f0f46c9863a0865f5fe56f47c13";
    static final String ABC = "85c49fe9df25db81b88aee2da59492bbc1e83fe63cd65dbf42e05f6678fce185";
    static final int C = 16 << 20;
    static final Map<Integer, String> PATTERN = Map.of(
            C - 1, "9e0a8e03a079d6d987422e2b9bd2030edd502c9563b9f2227ec1bc9c3dc0ae23",
            C, "b2389fdc476ff72d0f3186cc3ebbbe376e5e1b122c9f13f8809ba5e106eee342",
            C + 1, "803404615698700e83c15ce117bf0b7dab87226875d8b374a7ad68e0ac83369e",
            40 << 20, "feed4b9bb7e2dc88ae4b5d108ed1cf94881677e9f7a26ec32e976e102d300c95");

    @TempDir
    Path dir;

    static byte[] pattern(int n) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) (((long) i * 131 + (i >>> 16)) & 0xff);
        }
        return b;
    }

    @Test
    void shouldMatchTheIndependentVectorsForByteArrays() {
        assertEquals(EMPTY, TreeDigest.hex(TreeDigest.digest(new byte[0])));
        assertEquals(ABC, TreeDigest.hex(TreeDigest.digest("abc".getBytes(java.nio.charset.StandardCharsets.US_ASCII))));
        byte[] big = pattern(40 << 20);
        PATTERN.forEach((n, hex) -> assertEquals(hex, TreeDigest.hex(TreeDigest.digest(java.util.Arrays.copyOf(big, n))),
                n + " bytes"));
    }

    @Test
    void shouldGiveTheSameDigestFromNativeMemoryAndFilesOnAnyNumberOfThreads() throws Exception {
        byte[] big = pattern(40 << 20);
        Path file = dir.resolve("pattern.bin");
        ByteBuffer withPrefix = ByteBuffer.allocate(4096 + big.length);
        withPrefix.position(4096);
        withPrefix.put(big);
        Files.write(file, withPrefix.array());
        try (Mapping m = Posix.mmapAnonymous(big.length, "tree digest test");
                Fd fd = Posix.open(file, Posix.O_RDONLY, 0)) {
            RawMemory.copy(big, RawMemory.BYTE_ARRAY_BASE, null, m.address(), big.length);
            for (int threads : new int[] {1, 3}) {
                for (Map.Entry<Integer, String> e : PATTERN.entrySet()) {
                    assertEquals(e.getValue(), TreeDigest.hex(TreeDigest.digest(m.address(), e.getKey(), threads)),
                            "memory, " + e.getKey() + " bytes, " + threads + " threads");
                }
                assertEquals(PATTERN.get(40 << 20), TreeDigest.hex(TreeDigest.digest(fd, 4096, big.length, threads)),
                        "file region, " + threads + " threads");
                assertEquals(PATTERN.get(C + 1), TreeDigest.hex(TreeDigest.digest(fd, 4096, C + 1, threads)));
            }
            assertEquals(EMPTY, TreeDigest.hex(TreeDigest.digest(0, 0, 2)), "empty memory at address 0");
            assertEquals(EMPTY, TreeDigest.hex(TreeDigest.digest(fd, 17, 0, 2)), "empty file region");
        }
    }

    @Test
    void shouldDigestManySourcesInOneCallAsEachAlone() throws Exception {
        Random rnd = new Random(11);
        Path file = dir.resolve("random.bin");
        byte[] data = new byte[(3 << 20) + 12345];
        rnd.nextBytes(data);
        Files.write(file, data);
        try (Mapping m = Posix.mmapAnonymous(data.length, "tree digest test");
                Fd fd = Posix.open(file, Posix.O_RDONLY, 0)) {
            RawMemory.copy(data, RawMemory.BYTE_ARRAY_BASE, null, m.address(), data.length);
            List<TreeDigest.Source> sources = new ArrayList<>();
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < 40; i++) {
                int off = rnd.nextInt(data.length);
                int len = i % 7 == 0 ? 0 : rnd.nextInt(data.length - off + 1);
                expected.add(TreeDigest.hex(TreeDigest.digest(java.util.Arrays.copyOfRange(data, off, off + len))));
                sources.add(i % 2 == 0 ? new TreeDigest.Memory(m.address() + off, len)
                        : new TreeDigest.FileRegion(fd, off, len, "random.bin"));
            }
            for (int threads : new int[] {1, 3}) {
                assertEquals(expected, TreeDigest.digestAll(sources, threads).stream().map(TreeDigest::hex).toList(),
                        threads + " threads");
            }
        }
    }

    @Test
    void shouldGiveEachChunksSha256AsLeavesAndCountEveryByteOnce() throws Exception {
        byte[] data = pattern((int) (2 * C + 777));
        try (Mapping m = Posix.mmapAnonymous(data.length, "tree digest test")) {
            RawMemory.copy(data, RawMemory.BYTE_ARRAY_BASE, null, m.address(), data.length);
            java.util.concurrent.atomic.AtomicLong done = new java.util.concurrent.atomic.AtomicLong();
            List<byte[][]> leaves = TreeDigest.leavesAll(List.of(new TreeDigest.Memory(m.address(), data.length),
                    new TreeDigest.Memory(0, 0)), 2, done::addAndGet);
            assertEquals(3, leaves.get(0).length);
            assertEquals(0, leaves.get(1).length, "no leaf for no bytes");
            java.security.MessageDigest md = java.security.MessageDigest.getInstance("SHA-256");
            for (int c = 0; c < 3; c++) {
                md.update(data, (int) (c * C), (int) Math.min(C, data.length - c * C));
                assertEquals(TreeDigest.hex(md.digest()), TreeDigest.hex(leaves.get(0)[c]), "leaf " + c);
            }
            assertEquals(data.length, done.get(), "progress: every byte once");
        }
    }

    @Test
    void shouldGiveBothDigestsInOnePassAsEachAlone() throws Exception {
        long mib64 = ContentDigest.CHUNK;
        int length = (int) (2 * mib64 + C + 5); // two whole engram chunks, then one leaf and a bit
        byte[] data = pattern(length);
        Path file = dir.resolve("both.bin");
        Files.write(file, data);
        try (Mapping m = Posix.mmapAnonymous(length, "both digests test");
                Fd fd = Posix.open(file, Posix.O_RDONLY, 0)) {
            RawMemory.copy(data, RawMemory.BYTE_ARRAY_BASE, null, m.address(), length);
            List<TreeDigest.Source> sources = List.of(new TreeDigest.Memory(m.address(), length),
                    new TreeDigest.Memory(m.address(), mib64), new TreeDigest.Memory(m.address(), 3),
                    new TreeDigest.Memory(0, 0), new TreeDigest.FileRegion(fd, 7, mib64 + 1, "both.bin"));
            for (int threads : new int[] {1, 2}) {
                AtomicLong done = new AtomicLong();
                List<TableDigests> both = TreeDigest.bothAll(sources, threads, done::addAndGet);
                List<byte[]> trees = TreeDigest.digestAll(sources, threads);
                for (int i = 0; i < sources.size(); i++) {
                    TreeDigest.Source src = sources.get(i);
                    long engram = src instanceof TreeDigest.Memory mem ? ContentDigest.digest(mem.address(), mem.length())
                            : ContentDigest.digest(file, 7, mib64 + 1);
                    assertEquals(new TableDigests(ContentDigest.hex(engram), TreeDigest.hex(trees.get(i))), both.get(i),
                            "source " + i + " on " + threads + " threads");
                }
                assertEquals(sources.stream().mapToLong(TreeDigest.Source::length).sum(), done.get(), "every byte once");
            }
            assertEquals(PATTERN.get(C), TreeDigest.bothAll(List.of(new TreeDigest.Memory(m.address(), C)), 2,
                    x -> { }).get(0).treeDigest());
        }
    }

    @Test
    void shouldNameTheSourceOfARegionPastTheEndOfItsFile() throws Exception {
        Path file = dir.resolve("short.bin");
        Files.write(file, new byte[1000]);
        try (Fd fd = Posix.open(file, Posix.O_RDONLY, 0)) {
            CheckpointException e = assertThrows(CheckpointException.class, () -> TreeDigest.digestAll(
                    List.of(new TreeDigest.FileRegion(fd, 500, 600, "short.bin: tensor 'x'")), 2));
            assertTrue(e.getMessage().startsWith("short.bin: tensor 'x': reading 600 bytes at offset 500: "),
                    e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> new TreeDigest.FileRegion(fd, -1, 1, "x"));
            assertThrows(IllegalArgumentException.class, () -> TreeDigest.digest(fd, 0, 10, 0));
        }
    }

    @Test
    void shouldRecogniseOnlyLowerCaseHexOf64Digits() {
        assertTrue(TreeDigest.isHex(EMPTY));
        assertFalse(TreeDigest.isHex(EMPTY.toUpperCase(java.util.Locale.ROOT)));
        assertFalse(TreeDigest.isHex(EMPTY.substring(1)));
        assertFalse(TreeDigest.isHex(EMPTY + "0"));
        assertFalse(TreeDigest.isHex("g" + EMPTY.substring(1)));
        assertFalse(TreeDigest.isHex(null));
    }

    /** Only logs: the rate docs/checkpoints.md quotes (measured here, on whatever machine runs the tests). */
    @Test
    void logsTheThroughput() {
        long length = 128L << 20;
        try (Mapping m = Posix.mmapAnonymous(length, "tree digest throughput")) {
            RawMemory.fill(m.address(), length, (byte) 0x5a);
            TreeDigest.digest(m.address(), length, 2); // warm-up: the SHA-256 intrinsics get compiled
            for (int threads : new int[] {1, 2}) {
                double best = Double.MAX_VALUE;
                for (int i = 0; i < 2; i++) {
                    long t0 = System.nanoTime();
                    TreeDigest.digest(m.address(), length, threads);
                    best = Math.min(best, (System.nanoTime() - t0) / 1e9);
                }
                System.out.printf("sha256-tree-v1: %d MiB on %d thread(s) in %.3f s (best of 2): %.2f GB/s%n",
                        length >> 20, threads, best, length / best / 1e9);
            }
        }
    }
}
