package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.json.JsonReader;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code inspect --write-digests} and {@code import --verify-content}, with the daemon a separate process
 * serving real memfds: a clean import passes against the sidecar and against the checkpoint; a sidecar that
 * disagrees, lacks a table, or is malformed fails with one line naming the table (or the problem).
 */
@Timeout(180)
class ContentVerifyTest {
    /** Every dtype, a scalar, empty tensors, and one table of two 16 MiB leaves and a bit. */
    static Path checkpoint(Path dir) throws Exception {
        Random rnd = new Random(3);
        SafetensorsWriter w = CliIntegrationTest.everyDtype(rnd);
        byte[] big = new byte[(32 << 20) + 4096];
        rnd.nextBytes(big);
        w.add("big.u8", DType.U8, new long[] {big.length}, big);
        return w.write(dir.resolve("all.safetensors"));
    }

    /** Each tensor's digest computed here, from its bytes read independently of engram-host's readers. */
    static Map<String, String> expected(Path file) throws Exception {
        Map<String, String> out = new LinkedHashMap<>();
        for (TensorInfo t : Checkpoint.open(file).tensors()) {
            byte[] b = new byte[(int) t.length()];
            try (RandomAccessFile raf = new RandomAccessFile(t.file().toFile(), "r")) {
                raf.seek(t.offset());
                raf.readFully(b);
            }
            out.put(t.name(), TreeDigest.hex(TreeDigest.digest(b)));
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> json(String out) {
        return (Map<String, Object>) JsonReader.parse(out.strip());
    }

    @Test
    void shouldPassACleanImportAgainstTheSidecarAndAgainstTheCheckpoint(@TempDir Path dir) throws Exception {
        Path file = checkpoint(dir);
        Map<String, String> expected = expected(file);
        CliRun write = CliRun.of("inspect", "--write-digests", "--threads", "2", file.toString());
        assertEquals(0, write.exit(), write.err());
        Path sidecar = dir.resolve("all.safetensors.engram-digests.json");
        assertTrue(write.out().contains("digest record (version 2: engram-digest-v1 and sha256-tree-v1): wrote "
                + sidecar + ": " + expected.size() + " tables"), write.out());
        assertEquals(expected, DigestSidecar.read(sidecar));
        Path socket = dir.resolve("run/c.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", file.toString())
                .awaitReady()) {
            CliRun bySidecar = CliRun.of("import", "--socket", socket.toString(), "--verify-content", sidecar.toString());
            assertEquals(0, bySidecar.exit(), bySidecar.err());
            for (Map.Entry<String, String> e : expected.entrySet()) {
                assertTrue(bySidecar.out().lines().anyMatch(l -> l.startsWith("content " + e.getKey() + " ")
                        && l.endsWith(" verified " + e.getValue())), e.getKey() + " in\n" + bySidecar.out());
            }
            assertTrue(bySidecar.out().contains("content check (sha256-tree-v1): " + expected.size()
                    + " tables verified, 0 not checked, against " + sidecar), bySidecar.out());

            CliRun byCheckpoint = CliRun.of("import", "--socket", socket.toString(), "--json", "--verify-content",
                    file.toString(), "--verify-threads", "2");
            assertEquals(0, byCheckpoint.exit(), byCheckpoint.err());
            @SuppressWarnings("unchecked")
            Map<String, Object> check = (Map<String, Object>) json(byCheckpoint.out()).get("content_check");
            assertEquals((long) expected.size(), check.get("verified"), byCheckpoint.out());
            assertEquals("checkpoint " + file, check.get("trusted"));
            Map<String, Map<String, Object>> rows = CliIntegrationTest.importedTables(byCheckpoint.out());
            expected.forEach((name, hex) -> assertEquals(hex, rows.get(name).get("sha256-tree-v1"), name));
        }
    }

    @Test
    void shouldFailNamingTheTableWhenTheSidecarDisagreesLacksItOrIsMalformed(@TempDir Path dir) throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 2),
                2000, 64, 5));
        CliRun write = CliRun.of("inspect", "--write-digests", "--json", index.toString());
        assertEquals(0, write.exit(), write.err());
        Path sidecar = dir.resolve("ckpt/engram-digests.json");
        Map<String, String> good = DigestSidecar.read(sidecar);
        assertEquals(expected(index), good, "one sidecar for the sharded checkpoint, in its directory");
        Map<String, Object> inspected = json(write.out());
        @SuppressWarnings("unchecked")
        Map<String, Object> written = (Map<String, Object>) ((List<Object>) inspected.get("digest_sidecars")).get(0);
        assertEquals(sidecar.toString(), written.get("path"));
        assertEquals((long) good.size(), written.get("tables"));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> tensors = (List<Map<String, Object>>) inspected.get("tensors");
        tensors.forEach(t -> assertEquals(good.get((String) t.get("name")), t.get("sha256-tree-v1"), "per tensor"));
        String table = CheckpointGenerator.scaleName(2);
        String real = good.get(table);
        Path socket = dir.resolve("run/m.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString())
                .awaitReady()) {
            CliRun ok = CliRun.of("import", "--socket", socket.toString(), "--verify-content", sidecar.toString());
            assertEquals(0, ok.exit(), ok.err());

            Map<String, String> altered = new LinkedHashMap<>(good);
            String wrong = (real.charAt(0) == '0' ? "1" : "0") + real.substring(1);
            altered.put(table, wrong);
            Path bad = dir.resolve("altered.engram-digests.json");
            DigestSidecar.write(bad, altered);
            CliRun mismatch = CliRun.of("import", "--socket", socket.toString(), "--verify-content", bad.toString());
            assertEquals(1, mismatch.exit(), mismatch.out() + mismatch.err());
            assertEquals("engram-host import: content check (sha256-tree-v1) failed: table '" + table
                    + "': the mapped bytes have digest " + real + " but " + bad + " says " + wrong
                    + "; the tables were closed", mismatch.err().strip());

            Map<String, String> lacking = new LinkedHashMap<>(good);
            lacking.remove(table);
            Path partial = dir.resolve("partial.engram-digests.json");
            DigestSidecar.write(partial, lacking);
            CliRun missing = CliRun.of("import", "--socket", socket.toString(), "--verify-content", partial.toString());
            assertEquals(1, missing.exit());
            assertEquals("engram-host import: content check (sha256-tree-v1) failed: table '" + table
                    + "' has no trusted digest in " + partial + "; the tables were closed", missing.err().strip());

            Path truncated = Files.writeString(dir.resolve("truncated.engram-digests.json"),
                    Files.readString(sidecar).substring(0, 52));
            CliRun malformed = CliRun.of("import", "--socket", socket.toString(), "--verify-content", truncated.toString());
            assertEquals(1, malformed.exit());
            assertEquals("engram-host import: " + truncated + ": not a digest sidecar: JSON at byte 47: unterminated"
                    + " string", malformed.err().strip(), "cut inside the string that starts at byte 47, \"chunk_bytes\"");
            CliRun mixed = CliRun.of("import", "--socket", socket.toString(), "--verify-content", sidecar.toString(),
                    index.toString());
            assertEquals(1, mixed.exit());
            assertTrue(mixed.err().contains("give sidecars (*.engram-digests.json) or a checkpoint, not both"),
                    mixed.err());
        }
    }
}
