package io.engramhost.cli;

import io.engramhost.checkpoint.CheckpointException;
import io.engramhost.checkpoint.HfSnapshot;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.Selection;
import io.engramhost.checkpoint.ServedSelection;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.ParityCheck;
import io.engramhost.cuda.Cuda;
import io.engramhost.json.JsonReader;
import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.Expectation;
import io.engramhost.util.Bytes;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicLong;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code verify}: the parity check. Imports the resident tables as a client would (with a CPU view), reads
 * each through its mapping and the same tensor from the checkpoint files through their fds, hashes both in
 * 16 MiB chunks on N threads and reports every difference by table and byte offset, and every table missing
 * on either side. The tables are those {@code serve} selects from that checkpoint ({@link Selection}). Trusts no
 * recorded digest, and checks each Hugging Face snapshot file that holds a selected table against its blob's
 * name, the SHA-256 of the whole file ({@link HfSnapshot#verify}). Exit 0 when everything matches, 1 otherwise.
 */
@Command(name = "verify", description = "Compare every resident table, byte for byte, with the checkpoint on disk.")
final class VerifyCommand implements Callable<Integer> {
    @Mixin
    SocketOptions socket;

    @Mixin
    DaemonTrustOptions trust;

    @Option(names = "--checkpoint", required = true, arity = "1..*", paramLabel = "PATH",
            description = "The checkpoint to compare with (safetensors files, an index, or a directory).")
    List<Path> checkpoint;

    @Option(names = "--tables", split = ",", paramLabel = "GLOB",
            description = "Compare only these tables, on both sides (default: as serve selects them: the model's "
            + "config.json's Engram layers, else all).")
    List<String> tables = List.of();

    @Option(names = "--threads", defaultValue = "0", paramLabel = "N",
            description = "Hashing threads (default: one per CPU).")
    int threads;

    @Option(names = "--json", description = "Print one JSON document.")
    boolean json;

    @Option(names = "--progress-ms", defaultValue = "5000", paramLabel = "MS", hidden = true,
            description = "Interval of the progress lines when stderr is not a terminal (default: ${DEFAULT-VALUE}).")
    long progressMillis;

    @Override
    public Integer call() throws Exception {
        int n = threads > 0 ? threads : Runtime.getRuntime().availableProcessors();
        Path path = socket.resolveForClient();
        ClientOptions options = trust.apply(ClientOptions.defaults().withName("engram-host verify"));
        Map<?, ?> status = (Map<?, ?>) JsonReader.parse(EngramClient.status(path, options));
        if (Backend.CUDA_VMM.wireName().equals(status.get("backend"))) {
            // cuda-vmm tables are HOST_NUMA allocations: only a CUDA client can map them, for the CPU too.
            if (!Cuda.available()) {
                throw new IllegalStateException("the daemon's tables are cuda-vmm allocations, which only a client with"
                        + " CUDA can map for the CPU (" + Cuda.unavailabilityCause() + "): they cannot be checked on"
                        + " this machine");
            }
            options = options.withGpu(socket.device == null ? 0 : socket.device, true);
        }
        try (ImportedTables imported = EngramClient.connect(path, Expectation.any(), options);
                OpenCheckpoint cp = OpenCheckpoint.open(checkpoint)) {
            ServedSelection served = ServedSelection.of(cp.checkpoint(), tables, "");
            served.selection().warning().ifPresent(w -> System.err.println("engram-host verify: " + w));
            List<String> patterns = served.selection().patterns();
            List<HfSnapshot.Blob> blobs = served.identity().snapshotFiles();
            long blobBytes = HfSnapshot.bytes(cp.checkpoint(), blobs);
            long total = ParityCheck.bytesToHash(imported, cp, patterns) + blobBytes;
            AtomicLong done = new AtomicLong();
            ParityCheck.Report report;
            CheckpointException damaged = null;
            try (ProgressLine progress = ProgressLine.start("verify", total, done::get, progressMillis)) {
                report = ParityCheck.check(imported, cp, patterns, n, done::addAndGet);
                try {
                    HfSnapshot.verify(cp, blobs, n, done::addAndGet);
                } catch (CheckpointException e) {
                    damaged = e;
                }
            }
            cp.checkUnchanged("during the check", "its result is not to be trusted; check again once the file is stable");
            print(report, path, imported.fingerprintSha256(), served.selection(), blobs.size(), blobBytes, damaged);
            if (damaged != null) {
                throw damaged;
            }
            return report.ok() ? 0 : 1;
        }
    }

    private void print(ParityCheck.Report report, Path path, String fingerprint, Selection selection, int blobs,
            long blobBytes, CheckpointException damaged) {
        boolean ok = report.ok() && damaged == null;
        if (json) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("ok", ok);
            out.put("socket", path.toString());
            out.put("fingerprint", fingerprint);
            out.put("checkpoint", checkpoint.stream().map(Path::toString).toList());
            out.put("selection", selection.description());
            List<Object> rows = new ArrayList<>();
            for (ParityCheck.TableResult r : report.tables()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("name", r.table());
                m.put("status", r.status().text());
                m.put("bytes", r.bytes());
                if (!r.offsets().isEmpty()) {
                    m.put("offsets", r.offsets());
                }
                if (!r.detail().isEmpty()) {
                    m.put("detail", r.detail());
                }
                rows.add(m);
            }
            out.put("tables", rows);
            Map<String, Object> counts = new LinkedHashMap<>();
            for (ParityCheck.Status s : ParityCheck.Status.values()) {
                counts.put(s.name().toLowerCase(Locale.ROOT), report.count(s));
            }
            out.put("counts", counts);
            out.put("mismatches", report.mismatches().size());
            out.put("bytes_compared", report.bytesCompared());
            out.put("seconds", report.seconds());
            out.put("gb_per_s", report.gbPerSecond());
            out.put("threads", report.threads());
            Map<String, Object> snapshot = new LinkedHashMap<>();
            snapshot.put("files", blobs);
            snapshot.put("bytes", blobBytes);
            snapshot.put("damaged", damaged == null ? null : damaged.getMessage());
            out.put("hf_snapshot", snapshot);
            System.out.println(JsonWriter.write(out));
            return;
        }
        System.out.println("selection: " + selection.description());
        for (ParityCheck.TableResult r : report.tables()) {
            switch (r.status()) {
                case EQUAL -> {
                }
                case DIFFERS -> {
                    for (long offset : r.offsets()) {
                        System.out.printf("mismatch %s at byte %d%n", r.table(), offset);
                    }
                }
                default -> System.out.printf("%s %s: %s%n", r.status().text(), r.table(), r.detail());
            }
        }
        System.out.printf("verify: %d tables equal, %d differ, %d missing from the checkpoint, %d not resident, %d with"
                + " another layout, %d not checked; %s compared in %.3f s (%.2f GB/s, %d threads)%n",
                report.count(ParityCheck.Status.EQUAL), report.count(ParityCheck.Status.DIFFERS),
                report.count(ParityCheck.Status.MISSING_FROM_CHECKPOINT), report.count(ParityCheck.Status.NOT_RESIDENT),
                report.count(ParityCheck.Status.LAYOUT_DIFFERS), report.count(ParityCheck.Status.NOT_CHECKED),
                Bytes.format(report.bytesCompared()), report.seconds(), report.gbPerSecond(), report.threads());
        if (blobs > 0) {
            System.out.printf("hf-snapshot: %d files, %s, %s%n", blobs, Bytes.format(blobBytes), damaged == null
                    ? "each the SHA-256 its blob is named by" : "one of them damaged (stderr says which)");
        }
        if (ok) {
            System.out.println("verify ok");
        } else if (!report.ok()) {
            System.out.println("verify FAILED: " + report.mismatches().size() + (report.mismatches().size() == 1
                    ? " table does" : " tables do") + " not match the checkpoint");
        } else {
            System.out.println("verify FAILED: a Hugging Face blob does not match its name");
        }
    }
}
