package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Content identity from a digest record of version 2 and from Hugging Face snapshots (a cache laid out as
 * huggingface_hub lays it out, with relative links), the levels and notes, and the served fingerprint that carries
 * it, built by {@link ServedSelection}.
 */
@Timeout(60)
class ContentIdentityTest {
    @TempDir
    Path dir;

    private Path model() throws IOException {
        return CheckpointGenerator.writeModel(dir.resolve("m"), new CheckpointGenerator.Model(List.of(1, 14), 100, 32, 5,
                "", true, false)).served().getParent();
    }

    private static String sha256(Path file) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(file)));
    }

    @Test
    void shouldRecogniseSnapshotFilesByTheirLinkToABlobNamedByItsSha256() throws Exception {
        Path m = model();
        Path snapshot = CheckpointGenerator.writeHfSnapshot(m, dir.resolve("hub/models--org--name"), "0123abc");
        Path shard = snapshot.resolve("model-00005-of-00006.safetensors");
        assertTrue(Files.isSymbolicLink(shard));
        assertEquals(Path.of("../../blobs/" + sha256(m.resolve(shard.getFileName()))), Files.readSymbolicLink(shard));
        HfSnapshot.Blob blob = HfSnapshot.of(shard).orElseThrow();
        assertEquals(sha256(m.resolve(shard.getFileName())), blob.sha256());
        assertEquals(dir.resolve("hub/models--org--name/blobs/" + blob.sha256()), blob.blob());
        assertEquals(Optional.empty(), HfSnapshot.of(m.resolve(shard.getFileName())), "a regular file");
        Path absolute = Files.createSymbolicLink(dir.resolve("abs.safetensors"), blob.blob());
        assertEquals(blob.sha256(), HfSnapshot.of(absolute).orElseThrow().sha256(), "an absolute link alike");
        Path elsewhere = Files.createSymbolicLink(dir.resolve("other.safetensors"), m.resolve(shard.getFileName()));
        assertEquals(Optional.empty(), HfSnapshot.of(elsewhere), "a link to a file not named by its SHA-256");
        Files.createDirectories(dir.resolve("x"));
        Path notBlobs = Files.createSymbolicLink(dir.resolve("x/y.safetensors"), Path.of("../notblobs/" + blob.sha256()));
        assertEquals(Optional.empty(), HfSnapshot.of(notBlobs), "not in a directory named blobs");

        Checkpoint cp = Checkpoint.open(snapshot);
        ServedSelection served = ServedSelection.of(cp, List.of(), "");
        assertEquals(Selection.Rule.CONFIG, served.selection().rule(), "the snapshot's config.json is a link too");
        ContentIdentity id = served.identity();
        assertEquals(ContentIdentity.Level.HF_SNAPSHOT, id.level());
        assertEquals("hf-snapshot", id.level().text());
        assertEquals(List.of(), id.notes());
        assertEquals(2, id.snapshotFiles().size(), "the two files that hold the Engram tables");
        for (Fingerprint.FileEntry f : served.fingerprint().files()) {
            assertEquals(sha256(m.resolve(f.name())), f.contentSha256(), f.name());
        }
        assertTrue(served.fingerprint().tables().stream().noneMatch(Fingerprint.Table::hasIdentity));
        assertEquals(served.fingerprint(), Fingerprint.decode(served.fingerprint().canonicalBytes()));

        // the same bytes as plain files: the same headers, no identity, and no difference
        ServedSelection plain = ServedSelection.of(Checkpoint.open(m), List.of(), "");
        assertEquals(ContentIdentity.Level.HEADERS, plain.identity().level());
        assertEquals(List.of(), plain.fingerprint().differences(served.fingerprint()));
        assertFalse(plain.fingerprint().sharesIdentityWith(served.fingerprint()));
        assertFalse(plain.fingerprint().hasIdentity());
        assertEquals(plain.fingerprint(), Fingerprint.of(Checkpoint.open(m), plain.selection().patterns(), "",
                Fingerprint.LAYOUT_VERSION), "without identity, as Fingerprint.of has always made it");
    }

    @Test
    void shouldVerifyEverySnapshotFileAgainstItsBlobsName() throws Exception {
        Path snapshot = CheckpointGenerator.writeHfSnapshot(model(), dir.resolve("hub/models--org--name"), "r1");
        try (OpenCheckpoint cp = OpenCheckpoint.open(snapshot)) {
            List<HfSnapshot.Blob> blobs = ServedSelection.of(cp.checkpoint(), List.of(), "").identity().snapshotFiles();
            AtomicLong done = new AtomicLong();
            HfSnapshot.verify(cp, blobs, 2, done::addAndGet);
            long total = 0;
            for (HfSnapshot.Blob b : blobs) {
                total += Files.size(b.blob());
            }
            assertEquals(total, done.get());
        }
        // one byte of a table changed in its blob: the headers are as they were, the content is not
        TensorInfo weight = Checkpoint.open(snapshot).tensor("layers.14.engram.embed.weight");
        HfSnapshot.Blob damaged = HfSnapshot.of(weight.file()).orElseThrow();
        try (RandomAccessFile raf = new RandomAccessFile(damaged.blob().toFile(), "rw")) {
            raf.seek(weight.offset() + 7);
            int b = raf.read();
            raf.seek(weight.offset() + 7);
            raf.write(b ^ 1);
        }
        try (OpenCheckpoint cp = OpenCheckpoint.open(snapshot)) {
            List<HfSnapshot.Blob> blobs = ServedSelection.of(cp.checkpoint(), List.of(), "").identity().snapshotFiles();
            CheckpointException e = assertThrows(CheckpointException.class, () -> HfSnapshot.verify(cp, blobs, 2, x -> { }));
            assertEquals(damaged.blob() + ": its SHA-256 is " + sha256(damaged.blob()) + ", not the blob's name: the"
                    + " download is damaged; delete the blob and download it again", e.getMessage());
        }
    }

    @Test
    void shouldTakeEachTablesDigestsFromARecordOfVersion2() throws Exception {
        Path m = model();
        Checkpoint cp = Checkpoint.open(m);
        Selection engram = Selection.of(cp, List.of());
        Map<String, TableDigests> digests;
        try (OpenCheckpoint open = OpenCheckpoint.open(m)) {
            digests = DigestSidecar.computeRecord(open, engram.tensors(), 2, x -> { });
        }
        Path record = m.resolve("engram-digests.json");
        DigestSidecar.writeRecord(record, digests);
        ServedSelection served = ServedSelection.of(cp, List.of(), "memfd");
        assertEquals(ContentIdentity.Level.RECORD, served.identity().level());
        assertEquals(List.of(record), served.identity().records());
        assertEquals(List.of(), served.identity().notes());
        for (Fingerprint.Table t : served.fingerprint().tables()) {
            assertEquals(digests.get(t.name()).engramDigest(), t.engramDigest());
            assertEquals(digests.get(t.name()).treeDigest(), t.treeDigest());
        }
        assertTrue(served.fingerprint().files().stream().noneMatch(Fingerprint.FileEntry::hasContent));

        // --tables wider than the record: the other tables have no identity, and a note says which
        ServedSelection wider = ServedSelection.of(cp, List.of("layers.1*"), "memfd");
        assertEquals(ContentIdentity.Level.RECORD, wider.identity().level());
        assertEquals(1, wider.identity().notes().size());
        String note = wider.identity().notes().get(0);
        assertTrue(note.startsWith(record + ": the digest record does not cover 8 of the 12 selected tables"
                + " ('layers.1.engram.k_weight', 'layers.1.engram.q_weight', 'layers.1.engram.wkv.scale', ...), which"
                + " have no content identity: write it again with engram-host inspect --write-digests " + m), note);
        assertNull(wider.identity().table("layers.1.engram.q_weight"));
        assertEquals(digests.get("layers.1.engram.embed.weight"), wider.identity().table("layers.1.engram.embed.weight"));

        // a record of version 1 gives nothing, with a note
        DigestSidecar.write(record, Map.of("layers.1.engram.embed.weight", digests.get("layers.1.engram.embed.weight")
                .treeDigest()));
        ServedSelection v1 = ServedSelection.of(cp, List.of(), "memfd");
        assertEquals(ContentIdentity.Level.HEADERS, v1.identity().level());
        assertEquals(List.of(record + ": a digest record of version 1 holds no engram digest v1 and gives no content"
                + " identity: write version 2 with engram-host inspect --write-digests " + m), v1.identity().notes());
        assertFalse(v1.fingerprint().hasIdentity());

        // a damaged record is an error, not silence
        Files.writeString(record, "{");
        assertTrue(assertThrows(CheckpointException.class, () -> ServedSelection.of(cp, List.of(), "memfd"))
                .getMessage().startsWith(record + ": not a digest sidecar: JSON at byte 1"));
    }

    @Test
    void shouldCombineARecordAndASnapshot() throws Exception {
        Path m = model();
        Path snapshot = CheckpointGenerator.writeHfSnapshot(m, dir.resolve("hub/models--org--name"), "r1");
        try (OpenCheckpoint open = OpenCheckpoint.open(snapshot)) {
            DigestSidecar.writeRecord(DigestSidecar.locationFor(snapshot), DigestSidecar.computeRecord(open,
                    Selection.of(open.checkpoint(), List.of()).tensors(), 1, x -> { }));
        }
        ServedSelection served = ServedSelection.of(Checkpoint.open(snapshot), List.of(), "");
        assertEquals(ContentIdentity.Level.RECORD_AND_HF_SNAPSHOT, served.identity().level());
        assertEquals("record+hf-snapshot", served.identity().level().text());
        assertTrue(served.fingerprint().tables().stream().allMatch(t -> t.engramDigest() != null && t.treeDigest() != null));
        assertTrue(served.fingerprint().files().stream().allMatch(Fingerprint.FileEntry::hasContent));
        // the record, beside the files given: one .safetensors file has its own
        Path one = snapshot.resolve("model-00006-of-00006.safetensors");
        ServedSelection file = ServedSelection.of(Checkpoint.open(one), List.of("layers.14.engram.embed.*"), "");
        assertEquals(ContentIdentity.Level.HF_SNAPSHOT, file.identity().level(), "no " + one + ".engram-digests.json");
    }
}
