package io.engramhost.cli;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.SafetensorsFile;
import io.engramhost.checkpoint.Selection;
import io.engramhost.checkpoint.ServedSelection;
import io.engramhost.checkpoint.TableDigests;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.Backend;
import io.engramhost.util.Bytes;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code inspect}: a checkpoint's tensors and whether it is valid: the format rules and the limits every
 * daemon enforces (docs/checkpoints.md, "Limits"); which tensors {@code serve} would select and why, and the
 * content identity they have; with {@code --write-digests}, a digest record (version 2) of the selected tables.
 */
@Command(name = "inspect", description = "List a checkpoint's tensors and validate it, limits included (exit 1 when "
        + "invalid); say which tensors serve would select, and why.")
final class InspectCommand implements Callable<Integer> {
    @Parameters(arity = "1..*", paramLabel = "PATH", description = "A .safetensors file, an index.json or a directory"
            + " (a model directory: its config.json names the Engram layers).")
    List<Path> paths;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Option(names = "--tables", split = ",", paramLabel = "GLOB",
            description = "The tables serve would be given (default: as serve selects them: the model's config.json's "
            + "Engram layers, else all).")
    List<String> tables = List.of();

    @Option(names = "--backend", defaultValue = "memfd", paramLabel = "NAME",
            converter = WireNameOptions.BackendConverter.class, completionCandidates = WireNameOptions.BackendNames.class,
            description = "The backend serve would be given, for the limits: one of ${COMPLETION-CANDIDATES} "
            + "(default: ${DEFAULT-VALUE}).")
    Backend backend;

    @Option(names = "--write-digests", description = "Also compute both content digests (engram digest v1 and "
            + TreeDigest.ALGORITHM + ") of every selected table, each file read once through one fd, and write them, "
            + "per PATH, to a digest record: FILE" + DigestSidecar.FILE_SUFFIX + " for a file, "
            + DigestSidecar.DIRECTORY_FILE + " in the directory of a directory or an index.")
    boolean writeDigests;

    @Option(names = "--threads", defaultValue = "0", paramLabel = "N",
            description = "Threads for --write-digests (default: one per CPU).")
    int threads;

    @Override
    public Integer call() {
        Checkpoint cp;
        Fingerprint fp;
        ServedSelection served;
        try {
            cp = Checkpoint.open(paths);
            fp = Fingerprint.of(cp, List.of(), "", Fingerprint.LAYOUT_VERSION);
            served = ServedSelection.of(cp, tables, backend.wireName()); // what serve checks before it takes its socket
        } catch (CheckpointException e) {
            if (json) {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("valid", false);
                out.put("error", e.getMessage());
                System.out.println(JsonWriter.write(out));
                return 1;
            }
            throw e;
        }
        served.selection().warning().ifPresent(w -> System.err.println("engram-host inspect: " + w));
        List<Map<String, Object>> records = List.of();
        Map<String, TableDigests> digests = new LinkedHashMap<>();
        if (writeDigests) {
            records = writeDigests(digests);
            served = ServedSelection.of(cp, tables, backend.wireName()); // with the identity the records now give
        }
        served.identity().notes().forEach(n -> System.err.println("engram-host inspect: " + n));
        Selection selection = served.selection();
        if (json) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("valid", true);
            List<Object> files = new ArrayList<>();
            for (SafetensorsFile f : cp.files()) {
                files.add(Map.of("name", f.fileName(), "size", f.fileSize(), "header_sha256", f.headerSha256Hex(),
                        "tensors", f.tensors().size()));
            }
            out.put("files", files);
            List<Object> tensors = new ArrayList<>();
            for (TensorInfo t : cp.tensors()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("name", t.name());
                m.put("dtype", t.dtype().name());
                m.put("shape", Arrays.stream(t.shape()).boxed().toList());
                m.put("bytes", t.length());
                m.put("file", t.file().getFileName().toString());
                m.put("offset", t.offset());
                TableDigests d = digests.get(t.name());
                if (d != null) {
                    m.put(DigestSidecar.ENGRAM_KEY, d.engramDigest());
                    m.put(TreeDigest.ALGORITHM, d.treeDigest());
                }
                tensors.add(m);
            }
            out.put("tensors", tensors);
            out.put("bytes", Checkpoint.totalBytes(cp.tensors()));
            out.put("fingerprint", fp.sha256Hex());
            Map<String, Object> sel = new LinkedHashMap<>();
            sel.put("rule", selection.rule().text());
            sel.put("description", selection.description());
            sel.put("tables", selection.tensors().size());
            out.put("selection", sel);
            out.put("content_identity", served.identity().level().text());
            out.put("content_identity_notes", served.identity().notes());
            out.put("served_fingerprint", served.fingerprint().sha256Hex());
            if (writeDigests) {
                out.put("digest_sidecars", records);
            }
            System.out.println(JsonWriter.write(out));
            return 0;
        }
        for (SafetensorsFile f : cp.files()) {
            System.out.printf("file %s: %s, %d tensors, header sha256 %s%n", f.fileName(), Bytes.format(f.fileSize()),
                    f.tensors().size(), f.headerSha256Hex());
        }
        for (TensorInfo t : cp.tensors()) {
            System.out.printf("  %-48s %-8s %-18s %14d B%n", t.name(), t.dtype().name(), Arrays.toString(t.shape()),
                    t.length());
        }
        System.out.printf("valid: %d tensors, %s; fingerprint (all tables, any backend) %s%n", cp.tensors().size(),
                Bytes.format(Checkpoint.totalBytes(cp.tensors())), fp.sha256Hex());
        System.out.println("selection: " + selection.description());
        System.out.printf("as served: rule %s, backend %s, content identity %s, fingerprint %s%n",
                selection.rule().text(), backend.wireName(), served.identity().level().text(),
                served.fingerprint().sha256Hex());
        for (Map<String, Object> w : records) {
            System.out.printf("digest record (version %d: %s and %s): wrote %s: %d tables, %s in %.2f s (%.2f GB/s, %d"
                    + " threads)%n", DigestSidecar.VERSION_2, DigestSidecar.ENGRAM_KEY, TreeDigest.ALGORITHM,
                    w.get("path"), ((Number) w.get("tables")).longValue(), Bytes.format((Long) w.get("bytes")),
                    (Double) w.get("seconds"), (Double) w.get("gb_per_s"), ((Number) w.get("threads")).longValue());
        }
        return 0;
    }

    /**
     * One digest record per PATH, of the selected tables found through it: both digests of every selected table
     * computed in one pass, through the fds the files are validated from. Puts every digest in {@code digests}.
     */
    private List<Map<String, Object>> writeDigests(Map<String, TableDigests> digests) {
        int n = threads > 0 ? threads : Runtime.getRuntime().availableProcessors();
        List<Map<String, Object>> out = new ArrayList<>();
        long t0 = System.nanoTime();
        Map<Path, List<TensorInfo>> byPath = new LinkedHashMap<>();
        paths.forEach(p -> byPath.put(p, new ArrayList<>()));
        try (OpenCheckpoint open = OpenCheckpoint.open(paths)) {
            Checkpoint cp = open.checkpoint();
            List<TensorInfo> selected = Selection.of(cp, tables).tensors();
            digests.putAll(DigestSidecar.computeRecord(open, selected, n, done -> { }));
            selected.forEach(t -> byPath.get(cp.givenAs(cp.fileOf(t))).add(t));
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        for (Map.Entry<Path, List<TensorInfo>> e : byPath.entrySet()) {
            if (e.getValue().isEmpty()) {
                continue;
            }
            Map<String, TableDigests> record = new LinkedHashMap<>();
            e.getValue().forEach(t -> record.put(t.name(), digests.get(t.name())));
            Path target = DigestSidecar.locationFor(e.getKey());
            DigestSidecar.writeRecord(target, record);
            long bytes = Checkpoint.totalBytes(e.getValue());
            Map<String, Object> w = new LinkedHashMap<>();
            w.put("path", target.toString());
            w.put("version", DigestSidecar.VERSION_2);
            w.put("tables", record.size());
            w.put("bytes", bytes);
            w.put("seconds", seconds);
            w.put("gb_per_s", seconds > 0 ? bytes / seconds / 1e9 : 0.0);
            w.put("threads", n);
            out.add(w);
        }
        return out;
    }
}
