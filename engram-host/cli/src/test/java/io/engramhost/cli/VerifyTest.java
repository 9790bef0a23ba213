package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.checkpoint.TensorInfo;
import java.io.RandomAccessFile;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code verify}, the parity check, against a daemon process serving a checkpoint of every dtype and one table of
 * two 16 MiB chunks and a bit: equal files pass; tables missing on either side are named; bytes changed on disk
 * after the load are reported by table and exact offset, the first differing byte of each differing chunk.
 */
@Timeout(180)
class VerifyTest {
    @Test
    void shouldPassEqualFilesAndNameEveryMissingTableAndChangedByte(@TempDir Path dir) throws Exception {
        Path file = ContentVerifyTest.checkpoint(dir);
        Checkpoint cp = Checkpoint.open(file);
        Path socket = dir.resolve("run/v.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", file.toString())
                .awaitReady()) {
            CliRun equal = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", file.toString(),
                    "--threads", "2", "--progress-ms", "1");
            assertEquals(0, equal.exit(), equal.out() + equal.err());
            assertTrue(equal.out().contains("verify: " + cp.tensors().size() + " tables equal, 0 differ, 0 missing from"
                    + " the checkpoint, 0 not resident, 0 with another layout, 0 not checked;"), equal.out());
            assertTrue(equal.out().strip().endsWith("verify ok"), equal.out());
            assertTrue(equal.err().lines().anyMatch(l -> l.startsWith("verify: 100% (")), "progress on stderr: "
                    + equal.err());

            // Another checkpoint: one table fewer, one more.
            SafetensorsWriter w = new SafetensorsWriter();
            for (TensorInfo t : cp.tensors()) {
                if (!t.name().equals("t.F32")) {
                    w.add(t.name(), t.dtype(), t.shape(), bytes(t));
                }
            }
            w.add("extra.u8", io.engramhost.checkpoint.DType.U8, new long[] {3}, new byte[] {1, 2, 3});
            Path other = w.write(dir.resolve("other.safetensors"));
            CliRun missing = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", other.toString());
            assertEquals(1, missing.exit(), missing.out() + missing.err());
            assertTrue(missing.out().contains("missing from checkpoint t.F32: the checkpoint has no tensor of that name\n"),
                    missing.out());
            assertTrue(missing.out().contains("not resident extra.u8: the daemon does not serve it\n"), missing.out());
            assertTrue(missing.out().contains("verify FAILED: 2 tables do not match the checkpoint"), missing.out());
            CliRun selected = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", other.toString(),
                    "--tables", "big.*,t.BF16");
            assertEquals(0, selected.exit(), selected.out() + selected.err());
            assertTrue(selected.out().contains("verify: 2 tables equal, 0 differ"), selected.out());

            // Bytes changed on disk after the daemon loaded them: two chunks of big.u8, one byte of a small table.
            TensorInfo big = cp.tensor("big.u8");
            long second = (16L << 20) + 123;
            flip(big, 5);
            flip(big, second);
            flip(big, second + 1000); // same chunk: only its first difference is reported
            TensorInfo small = cp.tensor("t.I32");
            flip(small, small.length() - 1);
            CliRun changed = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", file.toString());
            assertEquals(1, changed.exit(), changed.out() + changed.err());
            List<String> lines = changed.out().lines().filter(l -> l.startsWith("mismatch ")).toList();
            assertEquals(List.of("mismatch t.I32 at byte " + (small.length() - 1), "mismatch big.u8 at byte 5",
                    "mismatch big.u8 at byte " + second).stream().sorted().toList(), lines.stream().sorted().toList(),
                    changed.out());
            assertTrue(changed.out().contains(" 2 differ, 0 missing"), changed.out());

            CliRun json = CliRun.of("verify", "--socket", socket.toString(), "--checkpoint", file.toString(), "--json");
            assertEquals(1, json.exit(), json.out() + json.err());
            Map<String, Object> doc = ContentVerifyTest.json(json.out());
            assertEquals(false, doc.get("ok"));
            assertEquals(2L, doc.get("mismatches"));
            Map<String, Map<String, Object>> rows = CliIntegrationTest.importedTables(json.out());
            assertEquals(List.of(5L, second), rows.get("big.u8").get("offsets"));
            assertEquals("differs", rows.get("big.u8").get("status"));
            assertEquals(List.of(small.length() - 1), rows.get("t.I32").get("offsets"));
            assertEquals("equal", rows.get("t.F32").get("status"));
            assertTrue(d.process.isAlive(), "the daemon serves on: " + d.log());
        }
    }

    private static byte[] bytes(TensorInfo t) throws Exception {
        byte[] b = new byte[(int) t.length()];
        try (RandomAccessFile raf = new RandomAccessFile(t.file().toFile(), "r")) {
            raf.seek(t.offset());
            raf.readFully(b);
        }
        return b;
    }

    /** Inverts the byte at {@code offset} of tensor {@code t}, in place in its file. */
    private static void flip(TensorInfo t, long offset) throws Exception {
        try (RandomAccessFile raf = new RandomAccessFile(t.file().toFile(), "rw")) {
            raf.seek(t.offset() + offset);
            int b = raf.read();
            raf.seek(t.offset() + offset);
            raf.write(~b & 0xff);
        }
    }
}
