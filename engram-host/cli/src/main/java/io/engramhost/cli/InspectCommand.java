package io.engramhost.cli;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.SafetensorsFile;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.json.JsonWriter;
import io.engramhost.store.Units;
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

/** {@code inspect}: a checkpoint's tensors and whether it is valid. */
@Command(name = "inspect", description = "List a checkpoint's tensors and validate it (exit 1 when invalid).")
final class InspectCommand implements Callable<Integer> {
    @Parameters(arity = "1..*", paramLabel = "PATH", description = "A .safetensors file, an index.json or a directory.")
    List<Path> paths;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Override
    public Integer call() {
        Checkpoint cp;
        try {
            cp = Checkpoint.open(paths);
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
        Fingerprint fp = Fingerprint.of(cp, List.of(), "", Fingerprint.LAYOUT_VERSION);
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
                tensors.add(m);
            }
            out.put("tensors", tensors);
            out.put("bytes", Checkpoint.totalBytes(cp.tensors()));
            out.put("fingerprint", fp.sha256Hex());
            System.out.println(JsonWriter.write(out));
            return 0;
        }
        for (SafetensorsFile f : cp.files()) {
            System.out.printf("file %s: %s, %d tensors, header sha256 %s%n", f.fileName(), Units.bytes(f.fileSize()),
                    f.tensors().size(), f.headerSha256Hex());
        }
        for (TensorInfo t : cp.tensors()) {
            System.out.printf("  %-48s %-8s %-18s %14d B%n", t.name(), t.dtype().name(), Arrays.toString(t.shape()),
                    t.length());
        }
        System.out.printf("valid: %d tensors, %s; fingerprint (all tables, any backend) %s%n", cp.tensors().size(),
                Units.bytes(Checkpoint.totalBytes(cp.tensors())), fp.sha256Hex());
        return 0;
    }
}
