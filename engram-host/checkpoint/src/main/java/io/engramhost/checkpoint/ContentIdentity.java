package io.engramhost.checkpoint;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

/**
 * What a checkpoint's content is known to be, beside its headers (docs/checkpoints.md, "Content identity"): each
 * selected table's two digests from the digest record (version 2) of the path it was found through, and each
 * file's SHA-256 where the file is a Hugging Face snapshot file ({@link HfSnapshot}). Nothing is hashed to make
 * it: the record is read, and the links are read.
 */
public final class ContentIdentity {
    /** No identity at all: the {@code headers} level. */
    public static final ContentIdentity NONE = new ContentIdentity(Map.of(), Map.of(), List.of(), List.of());
    /** At most this many table names in a note. */
    private static final int NAMES_SHOWN = 3;

    /** Where the identity comes from, as STATUS's {@code content_identity} and {@code inspect} name it. */
    public enum Level {
        HEADERS("headers"), RECORD("record"), HF_SNAPSHOT("hf-snapshot"), RECORD_AND_HF_SNAPSHOT("record+hf-snapshot");

        private final String text;

        Level(String text) {
            this.text = text;
        }

        /** e.g. {@code record+hf-snapshot}. */
        public String text() {
            return text;
        }
    }

    private final Map<Path, HfSnapshot.Blob> blobs;
    private final Map<String, TableDigests> tables;
    private final List<Path> records;
    private final List<String> notes;

    private ContentIdentity(Map<Path, HfSnapshot.Blob> blobs, Map<String, TableDigests> tables, List<Path> records,
            List<String> notes) {
        this.blobs = Collections.unmodifiableMap(new LinkedHashMap<>(blobs));
        this.tables = Collections.unmodifiableMap(new LinkedHashMap<>(tables));
        this.records = List.copyOf(records);
        this.notes = List.copyOf(notes);
    }

    /**
     * The identity of {@code selected} (tables of {@code checkpoint}) and of the files that hold them: for each
     * path the checkpoint was opened from, its digest record ({@link DigestSidecar#locationFor}) when there is one,
     * which gives the tables found through that path their digests; and each file's blob when it is a snapshot
     * file. A record of version 1 gives none (a note says so), and a note names the selected tables a record does
     * not cover. A malformed record is an error ({@link DigestSidecar#readRecord}).
     */
    public static ContentIdentity of(Checkpoint checkpoint, List<TensorInfo> selected) {
        Map<Path, List<TensorInfo>> byPath = new LinkedHashMap<>();
        Map<Path, HfSnapshot.Blob> blobs = new LinkedHashMap<>();
        for (TensorInfo t : selected) {
            SafetensorsFile f = checkpoint.fileOf(t);
            byPath.computeIfAbsent(checkpoint.givenAs(f), p -> new ArrayList<>()).add(t);
            if (!blobs.containsKey(f.path())) {
                HfSnapshot.of(f.path()).ifPresent(b -> blobs.put(f.path(), b));
            }
        }
        Map<String, TableDigests> tables = new TreeMap<>(FingerprintCodec::compareNames);
        List<Path> records = new ArrayList<>();
        List<String> notes = new ArrayList<>();
        for (Map.Entry<Path, List<TensorInfo>> e : byPath.entrySet()) {
            Path location = DigestSidecar.locationFor(e.getKey());
            if (!Files.exists(location)) {
                continue;
            }
            DigestSidecar.Record record = DigestSidecar.readRecord(location);
            if (record.version() < DigestSidecar.VERSION_2) {
                notes.add(location + ": a digest record of version " + record.version() + " holds no engram digest"
                        + " v1 and gives no content identity: write version 2 with engram-host inspect"
                        + " --write-digests " + e.getKey());
                continue;
            }
            records.add(location);
            List<String> uncovered = new ArrayList<>();
            for (TensorInfo t : e.getValue()) {
                TableDigests d = record.both().get(t.name());
                if (d == null) {
                    uncovered.add(t.name());
                } else {
                    tables.put(t.name(), d);
                }
            }
            if (!uncovered.isEmpty()) {
                notes.add(location + ": the digest record does not cover " + uncovered.size() + " of the "
                        + e.getValue().size() + " selected tables (" + names(uncovered) + "), which have no content"
                        + " identity: write it again with engram-host inspect --write-digests " + e.getKey());
            }
        }
        return new ContentIdentity(blobs, tables, records, notes);
    }

    private static String names(List<String> names) {
        String shown = names.stream().limit(NAMES_SHOWN).map(Limits::quoted).collect(Collectors.joining(", "));
        return names.size() > NAMES_SHOWN ? shown + ", ..." : shown;
    }

    /** The SHA-256 of the whole file {@code f} (its blob's name) when it is a snapshot file, else null. */
    public String fileSha256(SafetensorsFile f) {
        HfSnapshot.Blob b = blobs.get(f.path());
        return b == null ? null : b.sha256();
    }

    /** The digests of the table named {@code name} from a digest record, or null. */
    public TableDigests table(String name) {
        return tables.get(name);
    }

    /** Every table's digests from the records, by name. */
    public Map<String, TableDigests> tables() {
        return tables;
    }

    /** The snapshot files among those that hold a selected table, in checkpoint order. */
    public List<HfSnapshot.Blob> snapshotFiles() {
        return List.copyOf(blobs.values());
    }

    /** The version 2 records that gave tables their digests. */
    public List<Path> records() {
        return records;
    }

    /** One line each: a record of version 1 ignored, tables a record does not cover. */
    public List<String> notes() {
        return notes;
    }

    /** Where the identity comes from: a record (any table with digests), a snapshot (any file with a blob), both, or neither. */
    public Level level() {
        boolean record = !tables.isEmpty();
        boolean snapshot = !blobs.isEmpty();
        return record && snapshot ? Level.RECORD_AND_HF_SNAPSHOT : record ? Level.RECORD
                : snapshot ? Level.HF_SNAPSHOT : Level.HEADERS;
    }

    @Override
    public String toString() {
        return "ContentIdentity[" + level().text() + ", " + tables.size() + " tables, " + blobs.size() + " files]";
    }
}
