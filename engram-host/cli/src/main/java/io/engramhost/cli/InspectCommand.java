package io.engramhost.cli;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.Limits;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.SafetensorsFile;
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
 * daemon enforces (docs/checkpoints.md, "Limits"); with {@code --write-digests}, every table's content
 * digest written to a sidecar file.
 */
@Command(name = "inspect", description = "List a checkpoint's tensors and validate it, limits included (exit 1 when "
        + "invalid).")
final class InspectCommand implements Callable<Integer> {
    @Parameters(arity = "1..*", paramLabel = "PATH", description = "A .safetensors file, an index.json or a directory.")
    List<Path> paths;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Option(names = "--tables", split = ",", paramLabel = "GLOB",
            description = "The tables serve would be given, for the limits (default: all).")
    List<String> tables = List.of();

    @Option(names = "--backend", defaultValue = "memfd", paramLabel = "NAME",
            converter = WireNameOptions.BackendConverter.class, completionCandidates = WireNameOptions.BackendNames.class,
            description = "The backend serve would be given, for the limits: one of ${COMPLETION-CANDIDATES} "
            + "(default: ${DEFAULT-VALUE}).")
    Backend backend;

    @Option(names = "--write-digests", description = "Also compute every tensor's " + TreeDigest.ALGORITHM
            + " content digest (each file read once, through one fd) and write them, per PATH, to a sidecar: "
            + "FILE" + DigestSidecar.FILE_SUFFIX + " for a file, " + DigestSidecar.DIRECTORY_FILE
            + " in the directory of a directory or an index.")
    boolean writeDigests;

    @Option(names = "--threads", defaultValue = "0", paramLabel = "N",
            description = "Threads for --write-digests (default: one per CPU).")
    int threads;

    @picocli.CommandLine.Spec
    picocli.CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        Checkpoint cp;
        Fingerprint fp;
        try {
            cp = Checkpoint.open(paths);
            fp = Fingerprint.of(cp, List.of(), "", Fingerprint.LAYOUT_VERSION);
            Limits.checkServed(cp, tables, backend.wireName()); // what serve checks before it takes its socket
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
        List<Map<String, Object>> sidecars = writeDigests ? writeDigests() : List.of();
        Map<String, String> digests = new LinkedHashMap<>();
        sidecars.forEach(w -> digests.putAll(castDigests(w.remove("digests"))));
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
                if (digests.containsKey(t.name())) {
                    m.put(TreeDigest.ALGORITHM, digests.get(t.name()));
                }
                tensors.add(m);
            }
            out.put("tensors", tensors);
            out.put("bytes", Checkpoint.totalBytes(cp.tensors()));
            out.put("fingerprint", fp.sha256Hex());
            if (writeDigests) {
                out.put("digest_sidecars", sidecars);
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
        for (Map<String, Object> w : sidecars) {
            System.out.printf("digests (%s): wrote %s: %d tables, %s in %.2f s (%.2f GB/s, %d threads)%n",
                    TreeDigest.ALGORITHM, w.get("path"), w.get("tables"), Bytes.format((Long) w.get("bytes")),
                    (Double) w.get("seconds"), (Double) w.get("gb_per_s"), w.get("threads"));
        }
        return 0;
    }

    /** One sidecar per PATH: the digests of its tensors, read through the fds they are validated from. */
    private List<Map<String, Object>> writeDigests() {
        int n = threads > 0 ? threads : Runtime.getRuntime().availableProcessors();
        List<Map<String, Object>> out = new ArrayList<>();
        for (Path p : paths) {
            long t0 = System.nanoTime();
            Map<String, String> digests;
            long bytes;
            try (OpenCheckpoint one = OpenCheckpoint.open(List.of(p))) {
                digests = DigestSidecar.compute(one, one.checkpoint().tensors(), n);
                bytes = Checkpoint.totalBytes(one.checkpoint().tensors());
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            Path target = DigestSidecar.locationFor(p);
            DigestSidecar.write(target, digests);
            Map<String, Object> w = new LinkedHashMap<>();
            w.put("path", target.toString());
            w.put("tables", digests.size());
            w.put("bytes", bytes);
            w.put("seconds", seconds);
            w.put("gb_per_s", seconds > 0 ? bytes / seconds / 1e9 : 0.0);
            w.put("threads", n);
            w.put("digests", digests);
            out.add(w);
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, String> castDigests(Object o) {
        return (Map<String, String>) o;
    }
}
