package io.engramhost.checkpoint;

import io.engramhost.os.RawMemory;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(60)
class CheckpointLoaderTest {
    private static final long GAP = 4096;
    private static final byte GUARD = (byte) 0xab;

    @TempDir
    Path dir;
    private Checkpoint checkpoint;
    private int fdsBefore;

    @BeforeEach
    void generate() throws IOException {
        fdsBefore = Fd.openCount();
        checkpoint = Checkpoint.open(CheckpointGenerator.writeSharded(dir,
                new CheckpointGenerator.Spec(List.of(1, 14), 40_000, 256, 8)));
    }

    @AfterEach
    void nothingLeaks() {
        assertEquals(fdsBefore, Fd.openCount(), "every file the loader opened is closed");
    }

    /** Places tensors one after another with a guard gap after each; returns name -> offset in the mapping. */
    private static Map<String, Long> layout(List<TensorInfo> tensors) {
        Map<String, Long> at = new HashMap<>();
        long p = 0;
        for (TensorInfo t : tensors) {
            at.put(t.name(), p);
            p += t.length() + GAP;
        }
        at.put("", p);
        return at;
    }

    @Test
    void shouldReadExactlyTheFileBytesWithSeveralThreads() throws Exception {
        List<TensorInfo> tensors = checkpoint.tensors();
        Map<String, Long> at = layout(tensors);
        long size = at.get("");
        try (Mapping m = Posix.mmapAnonymous(size, "loader test")) {
            RawMemory.fill(m.address(), size, GUARD);
            CountDownLatch twoReaders = new CountDownLatch(2);
            Set<String> threads = ConcurrentHashMap.newKeySet();
            AtomicLong last = new AtomicLong();
            AtomicBoolean overlapped = new AtomicBoolean();
            AtomicInteger openDuringLoad = new AtomicInteger(-1);
            CheckpointLoader loader = new CheckpointLoader(4, 1 << 20, (done, total) -> { // through the page cache
                threads.add(Thread.currentThread().getName());
                openDuringLoad.set(Fd.openCount() - fdsBefore);
                last.accumulateAndGet(done, Math::max);
                twoReaders.countDown();
                try { // the first report waits for a second thread: proof that reads run concurrently
                    overlapped.compareAndSet(false, twoReaders.await(10, TimeUnit.SECONDS));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }).withReadMode(CheckpointLoader.ReadMode.BUFFERED);
            CheckpointLoader.Result r = loader.load(tensors, t -> m.address() + at.get(t.name()));

            assertTrue(overlapped.get(), "two threads reported progress at once");
            assertTrue(threads.size() >= 2, "threads: " + threads);
            assertEquals(2, openDuringLoad.get(), "each of the two shards opened once");
            assertEquals(Checkpoint.totalBytes(tensors), r.bytes());
            assertEquals(r.bytes(), last.get(), "progress reached the total");
            assertEquals(2, r.files());
            assertEquals(4, r.threads());
            assertEquals(4, r.tensors());
            assertEquals(4, r.chunks(), "one digest chunk (64 MiB) per tensor");
            assertEquals(0, r.directBytes());
            assertTrue(r.seconds() > 0 && r.gibPerSecond() > 0);
            for (TensorInfo t : tensors) {
                long address = m.address() + at.get(t.name());
                assertArrayEquals(sha256(fileBytes(t)), ContentDigest.sha256(address, t.length()), t.name());
                assertEquals(ContentDigest.digest(t.file(), t.offset(), t.length()), ContentDigest.digest(address, t.length()));
                for (long g = 0; g < GAP; g++) {
                    if (RawMemory.getByte(address + t.length() + g) != GUARD) {
                        throw new AssertionError(t.name() + ": byte " + g + " past the end was overwritten");
                    }
                }
            }
        }
    }

    @Test
    void shouldNotReadEmptyTensorsNorAskTheirDestination() throws IOException {
        Path f = new SafetensorsWriter().add("empty", DType.F32, new long[] {0, 5}, new byte[0])
                .add("scalar", DType.I64, new long[] {}, SafetensorsWriterTest.pattern(8, 1))
                .write(dir.resolve("small.safetensors"));
        SafetensorsFile st = SafetensorsFile.open(f);
        List<String> asked = new ArrayList<>();
        try (Mapping m = Posix.mmapAnonymous(4096, "small")) {
            CheckpointLoader.Result r = new CheckpointLoader(3).load(st.tensors(), t -> {
                asked.add(t.name());
                return m.address();
            });
            assertEquals(List.of("scalar"), asked);
            assertEquals(8, r.bytes());
            assertEquals(1, r.threads(), "one chunk needs one thread");
            byte[] got = new byte[8];
            RawMemory.copy(m.address(), got, 0, 8);
            assertArrayEquals(SafetensorsWriterTest.pattern(8, 1), got);
        }
        CheckpointLoader.Result none = new CheckpointLoader(2).load(List.of(st.tensor("empty")), t -> 0);
        assertEquals(0, none.bytes());
        assertEquals(0, none.files());
    }

    @Test
    void shouldNameFileAndTensorWhenAReadFails() throws IOException {
        TensorInfo w = checkpoint.tensor("engram.layers.14.embedding.weight");
        try (RandomAccessFile raf = new RandomAccessFile(w.file().toFile(), "rw")) {
            raf.setLength(w.offset() + 100); // the file shrank after validation
        }
        try (Mapping m = Posix.mmapAnonymous(w.length(), "fail")) {
            CheckpointException e = assertThrows(CheckpointException.class,
                    () -> new CheckpointLoader(2).load(List.of(w), t -> m.address()));
            assertEquals(w.file() + ": tensor '" + w.name() + "': ends at byte " + (w.offset() + w.length())
                    + " but the file now has " + (w.offset() + 100) + " (changed since it was validated?)", e.getMessage());
        }
        TensorInfo s = checkpoint.tensor("engram.layers.1.embedding.scale");
        CheckpointException zero = assertThrows(CheckpointException.class,
                () -> new CheckpointLoader(1).load(List.of(s), t -> 0));
        assertEquals(s.file() + ": tensor '" + s.name() + "': destination address is 0", zero.getMessage());
    }

    @Test
    void shouldFailCleanlyWhenTheFileShrinksDuringAnODirectLoad() throws Exception {
        long length = 3 * CheckpointLoader.DIRECT_PIECE + 777; // several O_DIRECT pieces
        byte[] data = new byte[(int) length];
        new java.util.Random(9).nextBytes(data);
        Path f = new SafetensorsWriter().add("t", DType.U8, new long[] {length}, data).write(dir.resolve("shrinks.safetensors"));
        TensorInfo t = SafetensorsFile.open(f).tensor("t");
        java.util.concurrent.atomic.AtomicBoolean cut = new java.util.concurrent.atomic.AtomicBoolean();
        CheckpointLoader.ProgressListener shrinkOnce = (done, total) -> { // after the first piece: the rest is gone
            if (cut.compareAndSet(false, true)) {
                try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
                    raf.setLength(t.offset() + CheckpointLoader.DIRECT_PIECE);
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }
        };
        try (Mapping m = Posix.mmapAnonymous(length, "shrinks")) {
            CheckpointLoader.Result whole = new CheckpointLoader(1).withReadMode(CheckpointLoader.ReadMode.DIRECT)
                    .load(List.of(t), x -> m.address());
            org.junit.jupiter.api.Assumptions.assumeTrue(whole.directRefused() == null, "no O_DIRECT here: " + whole.directRefused());
            assertEquals(ContentDigest.digest(data), whole.digest(t));
            CheckpointException e = assertThrows(CheckpointException.class, () -> new CheckpointLoader(1,
                    CheckpointLoader.DEFAULT_PIECE, shrinkOnce).withReadMode(CheckpointLoader.ReadMode.DIRECT)
                    .load(List.of(t), x -> m.address()));
            assertTrue(e.getMessage().startsWith(f + ": tensor 't': reading "), e.getMessage());
            assertTrue(e.getMessage().contains("(O_DIRECT)") && e.getMessage().contains("unexpected end of file"),
                    e.getMessage());
        }
    }

    @Test
    void shouldReportAReadErrorWithTheErrno() throws IOException {
        TensorInfo s = checkpoint.tensor("engram.layers.1.embedding.scale");
        // A destination the kernel cannot write to: pread fails with EFAULT.
        try (Mapping ro = Posix.mmap(4096, Posix.PROT_READ, Posix.MAP_PRIVATE | Posix.MAP_ANONYMOUS, null, 0)) {
            CheckpointException e = assertThrows(CheckpointException.class,
                    () -> new CheckpointLoader(1, 1024, null).load(List.of(s), t -> ro.address()));
            assertTrue(e.getMessage().startsWith(s.file() + ": tensor '" + s.name() + "': reading 1024 bytes at file"
                    + " offset " + s.offset() + ": pread("), e.getMessage());
            assertTrue(e.getMessage().contains("EFAULT"), e.getMessage());
        }
    }

    @Test
    void shouldStopAndCloseWhenTheListenerFails() {
        List<TensorInfo> tensors = checkpoint.tensors();
        Map<String, Long> at = layout(tensors);
        try (Mapping m = Posix.mmapAnonymous(at.get(""), "listener")) {
            CheckpointException e = assertThrows(CheckpointException.class, () -> new CheckpointLoader(2, 1 << 20,
                    (done, total) -> {
                        throw new IllegalStateException("stop");
                    }).load(tensors, t -> m.address() + at.get(t.name())));
            assertEquals("progress listener failed: java.lang.IllegalStateException: stop", e.getMessage());
        }
    }

    @Test
    void shouldDigestAsItReadsInEveryReadMode() throws Exception {
        List<TensorInfo> tensors = checkpoint.tensors();
        Map<String, Long> at = layout(tensors);
        for (CheckpointLoader.ReadMode mode : CheckpointLoader.ReadMode.values()) {
            try (Mapping m = Posix.mmapAnonymous(at.get(""), "modes")) {
                CheckpointLoader.Result r = new CheckpointLoader(3, 4096, null).withReadMode(mode)
                        .load(tensors, t -> m.address() + at.get(t.name()));
                for (TensorInfo t : tensors) {
                    long address = m.address() + at.get(t.name());
                    assertArrayEquals(sha256(fileBytes(t)), ContentDigest.sha256(address, t.length()), mode + " " + t.name());
                    assertEquals(ContentDigest.digest(t.file(), t.offset(), t.length()), r.digest(t), mode + " " + t.name());
                }
                long total = Checkpoint.totalBytes(tensors);
                switch (mode) {
                    case BUFFERED -> assertEquals(0, r.directBytes());
                    case DIRECT -> assertTrue(r.directBytes() == total || r.directRefused() != null,
                            "all O_DIRECT, or refused by the filesystem: " + r);
                    case AUTO -> assertEquals(0, r.directBytes(), "a file just written is in the page cache: " + r);
                }
            }
        }
    }

    @Test
    void shouldReadWhatIsNotCachedWithODirectInAuto() throws Exception {
        TensorInfo w = checkpoint.tensor("engram.layers.14.embedding.weight");
        try (Fd fd = Posix.open(w.file(), Posix.O_RDONLY, 0)) {
            java.nio.channels.FileChannel.open(w.file(), java.nio.file.StandardOpenOption.WRITE).force(true);
            io.engramhost.os.PageCache.drop(fd);
            org.junit.jupiter.api.Assumptions.assumeTrue(io.engramhost.os.PageCache.residentPages(fd, Posix.size(fd)) == 0,
                    "the filesystem keeps this file's pages cached (tmpfs?): nothing to read from the disk");
        }
        try (Mapping m = Posix.mmapAnonymous(w.length(), "auto")) {
            CheckpointLoader.Result r = new CheckpointLoader(2).load(List.of(w), t -> m.address());
            org.junit.jupiter.api.Assumptions.assumeTrue(r.directRefused() == null, "no O_DIRECT here: " + r.directRefused());
            assertEquals(w.length(), r.directBytes(), "a cold file is read with O_DIRECT");
            assertArrayEquals(sha256(fileBytes(w)), ContentDigest.sha256(m.address(), w.length()));
            assertEquals(ContentDigest.digest(w.file(), w.offset(), w.length()), r.digest(w));
        }
    }

    @Test
    void shouldDigestATensorOfSeveralChunksAsTheParallelDigestDoes() throws Exception {
        long length = ContentDigest.CHUNK + 4099; // two digest chunks, the second short and unaligned
        byte[] data = new byte[(int) length];
        new java.util.Random(3).nextBytes(data);
        Path f = new SafetensorsWriter().add("big", DType.U8, new long[] {length}, data).write(dir.resolve("big.safetensors"));
        TensorInfo t = SafetensorsFile.open(f).tensor("big");
        for (CheckpointLoader.ReadMode mode : CheckpointLoader.ReadMode.values()) {
            try (Mapping m = Posix.mmapAnonymous(length, "big")) {
                CheckpointLoader.Result r = new CheckpointLoader(4).withReadMode(mode).load(List.of(t), x -> m.address());
                assertEquals(2, r.chunks());
                assertEquals(ContentDigest.digest(data), r.digest(t), mode.name());
                assertEquals(ContentDigest.digest(m.address(), length), r.digest(t), mode.name());
            }
        }
    }

    @Test
    void shouldEndEveryODirectPieceOnAnAlignedFileOffsetOrAUnitEnd() throws Exception {
        long length = 2 * ContentDigest.CHUNK + 12345; // three digest units, the tensor at an unaligned offset
        byte[] data = new byte[(int) length];
        new java.util.Random(5).nextBytes(data);
        Path f = new SafetensorsWriter().add("big", DType.U8, new long[] {length}, data).write(dir.resolve("pieces.safetensors"));
        TensorInfo t = SafetensorsFile.open(f).tensor("big");
        org.junit.jupiter.api.Assumptions.assumeTrue(t.offset() % CheckpointLoader.DIRECT_ALIGN != 0, "the tensor is aligned");
        List<Long> done = new java.util.concurrent.CopyOnWriteArrayList<>();
        try (Mapping m = Posix.mmapAnonymous(length, "pieces")) {
            CheckpointLoader.Result r = new CheckpointLoader(1, CheckpointLoader.DEFAULT_PIECE, (d, total) -> done.add(d))
                    .withReadMode(CheckpointLoader.ReadMode.DIRECT).load(List.of(t), x -> m.address());
            org.junit.jupiter.api.Assumptions.assumeTrue(r.directRefused() == null, "no O_DIRECT here: " + r.directRefused());
            assertEquals(ContentDigest.digest(data), r.digest(t));
            long previous = 0;
            for (long d : done) { // one thread: the pieces in file order, each ending where the next starts
                long end = t.offset() + d;
                assertTrue(d - previous <= CheckpointLoader.DIRECT_PIECE, "a piece of " + (d - previous) + " bytes");
                assertTrue(end % CheckpointLoader.DIRECT_PIECE == 0 || d % ContentDigest.CHUNK == 0 || d == length,
                        "piece ending at file offset " + end + " is neither on a 16 MiB boundary nor a unit's end");
                previous = d;
            }
            assertEquals(length, previous);
            // 3 units; each 16 MiB boundary inside the tensor splits a unit once more
            long boundaries = (t.offset() + length - 1) / CheckpointLoader.DIRECT_PIECE - t.offset() / CheckpointLoader.DIRECT_PIECE;
            assertEquals(3 + boundaries, done.size(), "pieces: " + done);
        }
    }

    @Test
    void shouldTakeWorkWhileItRunsAndStopCleanlyWhenAbandoned() throws Exception {
        List<TensorInfo> tensors = checkpoint.tensors();
        Map<String, Long> at = layout(tensors);
        try (Mapping m = Posix.mmapAnonymous(at.get(""), "session");
                OpenCheckpoint open = OpenCheckpoint.open(checkpoint.tensors().get(0).file().getParent())) {
            List<TensorInfo> all = open.checkpoint().tensors();
            try (CheckpointLoader.Session s = new CheckpointLoader(2).start(open, Checkpoint.totalBytes(all))) {
                s.add(all.subList(0, 2), t -> m.address() + at.get(t.name()));
                Thread.sleep(50);
                s.add(all.subList(2, all.size()), t -> m.address() + at.get(t.name()));
                CheckpointLoader.Result r = s.finish();
                assertEquals(all.size(), r.tensors());
                for (TensorInfo t : all) {
                    assertEquals(ContentDigest.digest(t.file(), t.offset(), t.length()), r.digest(t));
                }
            }
            try (CheckpointLoader.Session s = new CheckpointLoader(2).start(open, Checkpoint.totalBytes(all))) {
                s.add(all, t -> m.address() + at.get(t.name()));
            } // closed unfinished: its threads stop and are waited for
            CheckpointException e = assertThrows(CheckpointException.class, () -> {
                try (CheckpointLoader.Session s = new CheckpointLoader(1, 1024, (d, total) -> {
                    throw new IllegalStateException("stop");
                }).start(open, Checkpoint.totalBytes(all))) {
                    s.add(all, t -> m.address() + at.get(t.name()));
                    s.finish();
                }
            });
            assertEquals("progress listener failed: java.lang.IllegalStateException: stop", e.getMessage());
        }
        assertEquals(0, Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.getName().startsWith("engram-load-") && t.isAlive()).count(), "no load thread left");
    }

    @Test
    void shouldRefuseBadSettings() {
        assertEquals("threads must be at least 1, was 0",
                assertThrows(IllegalArgumentException.class, () -> new CheckpointLoader(0)).getMessage());
        assertEquals("chunk size must be positive, was 0",
                assertThrows(IllegalArgumentException.class, () -> new CheckpointLoader(1, 0, null)).getMessage());
    }

    private static byte[] fileBytes(TensorInfo t) throws IOException {
        return CheckpointGeneratorTest.bytesOf(t);
    }

    private static byte[] sha256(byte[] b) throws Exception {
        return MessageDigest.getInstance("SHA-256").digest(b);
    }
}
