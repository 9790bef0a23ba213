package io.engramhost.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.SafetensorsWriter;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.os.Fd;
import io.engramhost.protocol.Expectation;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The content check on tables a client loaded itself (no daemon listens, so connectOrLoad reads the checkpoint
 * into its own memory): the same check runs on a daemon's memfds in the cli module's ContentVerifyTest.
 */
@Timeout(60)
class ContentCheckTest {
    @TempDir
    Path dir;

    private ImportedTables load(Path checkpoint) {
        return EngramClient.connectOrLoad(dir.resolve("no-daemon.sock"), Expectation.any(),
                ClientOptions.defaults(), List.of(checkpoint), List.of(), 2);
    }

    private Path checkpoint() throws Exception {
        return new SafetensorsWriter().add("abc", DType.U8, new long[] {3}, "abc".getBytes())
                .add("empty", DType.F32, new long[] {0}, new byte[0]).add("scalar", DType.I32, new long[0], new byte[4])
                .write(dir.resolve("m.safetensors"));
    }

    @Test
    void shouldVerifyEveryTableAgainstTheCheckpointAndASidecar() throws Exception {
        Path file = checkpoint();
        try (ImportedTables t = load(file)) {
            ContentCheck.Report fromFile = ContentCheck.verify(t, ContentCheck.fromCheckpoint(List.of(file),
                    t.tables().keySet(), 2), 2);
            assertEquals(3, fromFile.verified());
            assertEquals(3 + 0 + 4, fromFile.bytesChecked(), "abc, empty, scalar");
            Map<String, String> digests = new HashMap<>();
            fromFile.tables().forEach(r -> digests.put(r.table(), r.digest()));
            assertEquals("85c49fe9df25db81b88aee2da59492bbc1e83fe63cd65dbf42e05f6678fce185", digests.get("abc"));
            assertEquals("0c4278d99b29da1ade86fade7817d53950883f0f46c9863a0865f5fe56f47c13", digests.get("empty"));
            Path sidecar = dir.resolve("m.safetensors.engram-digests.json");
            DigestSidecar.write(sidecar, digests);
            assertEquals(3, ContentCheck.verify(t, ContentCheck.fromSidecar(sidecar), 1).verified());
            assertTrue(!t.isClosed(), "a passed check leaves the tables open");
            assertEquals(3, t.table("abc").bytes());
        }
    }

    @Test
    void shouldCloseTheTablesAndNameTheTableAndBothDigestsOnAMismatch() throws Exception {
        Path file = checkpoint();
        int fds = Fd.openCount();
        ImportedTables t = load(file);
        Map<String, String> trusted = new HashMap<>(ContentCheck.fromCheckpoint(List.of(file), t.tables().keySet(), 2)
                .digests());
        String real = trusted.get("scalar");
        String wrong = TreeDigest.hex(TreeDigest.digest(new byte[] {1, 2, 3, 4}));
        trusted.put("scalar", wrong);
        ContentMismatchException e = assertThrows(ContentMismatchException.class,
                () -> ContentCheck.verify(t, new ContentCheck.Trusted("my list", trusted), 2));
        assertEquals("content check (sha256-tree-v1) failed: table 'scalar': the mapped bytes have digest " + real
                + " but my list says " + wrong + "; the tables were closed", e.getMessage());
        assertTrue(t.isClosed(), "not handed out");
        assertThrows(IllegalStateException.class, () -> t.table("abc").getByte(0));
        assertEquals(fds, Fd.openCount());

        ImportedTables again = load(file);
        trusted.remove("abc");
        trusted.put("scalar", real);
        ContentMismatchException missing = assertThrows(ContentMismatchException.class,
                () -> ContentCheck.verify(again, new ContentCheck.Trusted("my list", trusted), 2));
        assertEquals(List.of("table 'abc' has no trusted digest in my list"), missing.problems());
        assertTrue(again.isClosed());
    }

    @Test
    void shouldLeaveOutOfTheTrustedDigestsTheTablesTheCheckpointDoesNotHold() throws Exception {
        Path index = CheckpointGenerator.writeSharded(dir.resolve("s"), new CheckpointGenerator.Spec(List.of(1, 2), 500,
                32, 1));
        ContentCheck.Trusted t = ContentCheck.fromCheckpoint(List.of(index), List.of(
                CheckpointGenerator.weightName(2), "not.there"), 2);
        assertEquals(List.of(CheckpointGenerator.weightName(2)), List.copyOf(t.digests().keySet()));
        assertTrue(t.source().startsWith("checkpoint "), t.source());
    }
}
