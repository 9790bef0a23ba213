package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileTime;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A checkpoint validated and read through the same fds, and every way its file can change meanwhile. */
@Timeout(60)
class OpenCheckpointTest {
    static final String DURING = "during the test";
    static final String CONSEQUENCE = "refusing it";

    @TempDir
    Path dir;
    private int fdsBefore;

    @BeforeEach
    void countFds() {
        fdsBefore = Fd.openCount();
    }

    @AfterEach
    void nothingLeaks() {
        assertEquals(fdsBefore, Fd.openCount(), "every fd is closed");
    }

    /** Two tensors a (bytes 1) and b (bytes 2), 4096 bytes each; {@code swapped} puts b first in the data. */
    static Path twoTensors(Path file, boolean swapped) throws Exception {
        byte[] a = new byte[4096];
        byte[] b = new byte[4096];
        java.util.Arrays.fill(a, (byte) 1);
        java.util.Arrays.fill(b, (byte) 2);
        SafetensorsWriter w = new SafetensorsWriter();
        if (swapped) {
            w.add("b", DType.U8, new long[] {4096}, b).add("a", DType.U8, new long[] {4096}, a);
        } else {
            w.add("a", DType.U8, new long[] {4096}, a).add("b", DType.U8, new long[] {4096}, b);
        }
        return w.write(file);
    }

    private static String changed(OpenCheckpoint cp) {
        return assertThrows(CheckpointException.class, () -> cp.checkUnchanged(DURING, CONSEQUENCE)).getMessage();
    }

    /** Sets the file's mtime 2 s later than it was: unmistakable whatever the clock's granularity. */
    private static void touch(Path file) throws Exception {
        FileTime t = Files.getLastModifiedTime(file);
        Files.setLastModifiedTime(file, FileTime.from(t.to(TimeUnit.NANOSECONDS) + 2_000_000_000L, TimeUnit.NANOSECONDS));
    }

    private static Map<String, byte[]> load(OpenCheckpoint cp) {
        List<TensorInfo> tensors = cp.checkpoint().tensors();
        Map<String, byte[]> out = new HashMap<>();
        try (Mapping m = Posix.mmapAnonymous(tensors.size() * 4096L, "open checkpoint test")) {
            Map<TensorInfo, Long> at = new HashMap<>();
            for (int i = 0; i < tensors.size(); i++) {
                at.put(tensors.get(i), m.address() + i * 4096L);
            }
            new CheckpointLoader(2, 1024, null).load(cp, tensors, at::get);
            for (TensorInfo t : tensors) {
                byte[] b = new byte[(int) t.length()];
                RawMemory.copy(at.get(t), b, 0, b.length);
                out.put(t.name(), b);
            }
        }
        return out;
    }

    @Test
    void shouldPassWhenNothingChangedAndReadTheValidatedBytes() throws Exception {
        Path file = twoTensors(dir.resolve("m.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            assertEquals(1, cp.fileCount());
            assertEquals(fdsBefore + 1, Fd.openCount(), "one fd per file, held");
            Map<String, byte[]> bytes = load(cp);
            assertEquals(1, bytes.get("a")[0]);
            assertEquals(2, bytes.get("b")[4095]);
            cp.checkUnchanged(DURING, CONSEQUENCE);
            assertTrue(Posix.isCloexec(cp.fd(cp.checkpoint().tensor("a"))), "O_CLOEXEC");
            assertEquals(Checkpoint.open(file).files().get(0).headerSha256Hex(),
                    cp.checkpoint().files().get(0).headerSha256Hex(), "the same header hash as a plain open");
        }
    }

    @Test
    void shouldReadTheValidatedFileAfterARenameReplacementAndReportTheReplacement() throws Exception {
        Path file = twoTensors(dir.resolve("m.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            Path other = twoTensors(dir.resolve("other.safetensors"), true);
            assertEquals(Files.size(file), Files.size(other), "same size, header reordered");
            Files.move(other, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            Map<String, byte[]> bytes = load(cp);
            assertEquals(1, bytes.get("a")[0], "the fd still reads the file that was validated");
            assertEquals(2, bytes.get("b")[0]);
            // the old inode lost its name, which changes its ctime too
            assertEquals("checkpoint " + file + " changed " + DURING + " (ctime, the path now names another file): "
                    + CONSEQUENCE, changed(cp));
        }
    }

    @Test
    void shouldReportBytesOverwrittenInPlace() throws Exception {
        Path file = twoTensors(dir.resolve("m.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            Thread.sleep(20); // past the file system clock's tick
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
                raf.seek(raf.length() - 10);
                raf.write(new byte[] {9, 9, 9});
            }
            assertEquals("checkpoint " + file + " changed " + DURING + " (mtime, ctime): " + CONSEQUENCE, changed(cp));
        }
    }

    @Test
    void shouldReportATouchThatChangesNoByte() throws Exception {
        Path file = twoTensors(dir.resolve("m.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            touch(file);
            assertEquals("checkpoint " + file + " changed " + DURING + " (mtime, ctime): " + CONSEQUENCE, changed(cp));
        }
    }

    @Test
    void shouldReportAHeaderRewrittenInPlaceEvenWithItsMtimePutBack() throws Exception {
        Path file = twoTensors(dir.resolve("m.safetensors"), false);
        FileTime mtime = Files.getLastModifiedTime(file);
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            byte[] all = Files.readAllBytes(file);
            String text = new String(all, java.nio.charset.StandardCharsets.ISO_8859_1);
            int at = text.indexOf("\"a\"");
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
                raf.seek(at + 1);
                raf.write('c'); // tensor a renamed c: same length, another header
            }
            Files.setLastModifiedTime(file, mtime);
            String m = changed(cp);
            assertTrue(m.startsWith("checkpoint " + file + " changed " + DURING + " (ctime, header bytes): "), m);
        }
    }

    @Test
    void shouldReportATruncationARemovalAndAGrowth() throws Exception {
        Path file = twoTensors(dir.resolve("m.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(file)) {
            long size = Files.size(file);
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
                raf.setLength(20);
            }
            String m = changed(cp);
            assertTrue(m.contains("(size " + size + " -> 20 bytes, ") && m.contains("header bytes (the file is now shorter"
                    + " than its header)"), m);
        }
        Path grown = twoTensors(dir.resolve("g.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(grown)) {
            long size = Files.size(grown);
            Files.write(grown, new byte[] {1}, java.nio.file.StandardOpenOption.APPEND);
            String m = changed(cp);
            assertTrue(m.contains("(size " + size + " -> " + (size + 1) + " bytes, mtime, ctime)"), m);
        }
        Path removed = twoTensors(dir.resolve("r.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(removed)) {
            Files.delete(removed);
            String m = changed(cp);
            assertTrue(m.contains("the path no longer exists"), m);
            assertEquals(1, load(cp).get("a")[0], "an unlinked file is still read through its fd");
        }
    }

    @Test
    void shouldNameEveryFileThatChangedInOneLine() throws Exception {
        Path a = twoTensors(dir.resolve("a.safetensors"), false);
        SafetensorsWriter w = new SafetensorsWriter();
        w.add("z", DType.U8, new long[] {3}, new byte[] {1, 2, 3});
        Path b = w.write(dir.resolve("b.safetensors"));
        try (OpenCheckpoint cp = OpenCheckpoint.open(a, b)) {
            touch(a);
            touch(b);
            String m = changed(cp);
            assertEquals("checkpoint " + a + " changed " + DURING + " (mtime, ctime); also changed: " + b
                    + " (mtime, ctime): " + CONSEQUENCE, m);
            assertEquals(1, m.lines().count());
        }
    }

    @Test
    void shouldFollowASymlinkedFileAndNoticeItRetargeted() throws Exception {
        Path blob = twoTensors(dir.resolve("blob1"), false);
        Path blob2 = twoTensors(dir.resolve("blob2"), true);
        Path link = Files.createSymbolicLink(dir.resolve("m.safetensors"), blob.getFileName());
        try (OpenCheckpoint cp = OpenCheckpoint.open(link)) {
            cp.checkUnchanged(DURING, CONSEQUENCE);
            Files.delete(link);
            Files.createSymbolicLink(link, blob2.getFileName());
            assertTrue(changed(cp).contains("(the path now names another file)"));
        }
    }

    @Test
    void shouldCloseEveryFdWhenAFileIsInvalidAndRefuseAFifoWithoutHanging() throws Exception {
        Path good = twoTensors(dir.resolve("a.safetensors"), false);
        Path bad = RawSafetensors.write(dir.resolve("b.safetensors"), "{\"x\":1}", 0);
        CheckpointException e = assertThrows(CheckpointException.class, () -> OpenCheckpoint.open(good, bad));
        assertTrue(e.getMessage().contains("b.safetensors"), e.getMessage());
        assertEquals(fdsBefore, Fd.openCount(), "the valid file's fd is closed too");
        assertThrows(CheckpointException.class, () -> OpenCheckpoint.open(good, good));
        assertEquals(fdsBefore, Fd.openCount());

        Path fifo = dir.resolve("f.safetensors");
        Process mkfifo = new ProcessBuilder("mkfifo", fifo.toString()).start();
        assertEquals(0, mkfifo.waitFor());
        CheckpointException f = assertThrows(CheckpointException.class, () -> OpenCheckpoint.open(fifo));
        assertEquals(fifo + ": not a regular file", f.getMessage());
        CheckpointException missing = assertThrows(CheckpointException.class,
                () -> SafetensorsFile.open(dir.resolve("none.safetensors")));
        assertEquals(dir.resolve("none.safetensors") + ": no such file", missing.getMessage());
    }

    @Test
    void shouldRefuseATensorOfAnotherCheckpoint() throws Exception {
        Path a = twoTensors(dir.resolve("a.safetensors"), false);
        Path b = twoTensors(dir.resolve("b.safetensors"), false);
        try (OpenCheckpoint cp = OpenCheckpoint.open(a)) {
            TensorInfo foreign = Checkpoint.open(b).tensor("a");
            assertThrows(IllegalArgumentException.class, () -> cp.fd(foreign));
        }
    }

    @Test
    void shouldKeepTheByteExactContentsThroughTheLoaderAcrossChunks() throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("s"), new CheckpointGenerator.Spec(List.of(1, 2), 3000,
                64, 5));
        try (OpenCheckpoint cp = OpenCheckpoint.open(index)) {
            List<TensorInfo> tensors = cp.checkpoint().tensors();
            long total = Checkpoint.totalBytes(tensors);
            try (Mapping m = Posix.mmapAnonymous(total, "loader")) {
                Map<TensorInfo, Long> at = new HashMap<>();
                long p = 0;
                for (TensorInfo t : tensors) {
                    at.put(t, m.address() + p);
                    p += t.length();
                }
                CheckpointLoader.Result r = new CheckpointLoader(3, 4096, null).load(cp, tensors, at::get);
                assertEquals(2, r.files());
                for (TensorInfo t : tensors) {
                    byte[] expected = new byte[(int) t.length()];
                    try (RandomAccessFile raf = new RandomAccessFile(t.file().toFile(), "r")) {
                        raf.seek(t.offset());
                        raf.readFully(expected);
                    }
                    byte[] got = new byte[expected.length];
                    RawMemory.copy(at.get(t), got, 0, got.length);
                    assertArrayEquals(expected, got, t.name());
                }
            }
            cp.checkUnchanged(DURING, CONSEQUENCE);
            assertEquals(fdsBefore + 2, Fd.openCount(), "the loader closed none of the held fds");
        }
    }
}
