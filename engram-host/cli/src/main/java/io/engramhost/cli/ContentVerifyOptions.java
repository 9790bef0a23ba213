package io.engramhost.cli;

import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.client.ContentCheck;
import io.engramhost.client.ImportedTables;
import io.engramhost.util.Bytes;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import picocli.CommandLine.Option;

/**
 * {@code import --verify-content}: after the import, every CPU-readable table's content digest
 * ({@value TreeDigest#ALGORITHM}) computed over the mapped bytes and compared with a trusted one, from a
 * sidecar ({@code *.engram-digests.json}) or computed from the checkpoint (docs/checkpoints.md).
 */
final class ContentVerifyOptions {
    @Option(names = "--verify-content", arity = "1..*", paramLabel = "CHECKPOINT_OR_SIDECAR",
            description = "After importing, check every CPU-readable table's " + TreeDigest.ALGORITHM + " digest over"
                    + " the mapped bytes against a sidecar (*" + DigestSidecar.FILE_SUFFIX + ", "
                    + DigestSidecar.DIRECTORY_FILE + "; from 'inspect --write-digests') or against digests computed"
                    + " from this checkpoint; any difference fails (exit 1) and the tables are closed.")
    List<Path> sources;

    @Option(names = "--verify-threads", defaultValue = "0", paramLabel = "N",
            description = "Threads for --verify-content (default: one per CPU).")
    int threads;

    /** What the check found, for the command's output; {@link #NONE} when it was not asked for. */
    static final class Outcome {
        static final Outcome NONE = new Outcome(null, Map.of(), 0);
        private final ContentCheck.Report report;
        private final Map<String, ContentCheck.Result> byTable;
        private final double trustedSeconds;

        private Outcome(ContentCheck.Report report, Map<String, ContentCheck.Result> byTable, double trustedSeconds) {
            this.report = report;
            this.byTable = byTable;
            this.trustedSeconds = trustedSeconds;
        }

        /** Adds each row's "content" status (and its digest) by the row's "name". */
        void annotate(List<Map<String, Object>> rows) {
            for (Map<String, Object> row : rows) {
                ContentCheck.Result r = byTable.get((String) row.get("name"));
                if (r != null) {
                    row.put("content", r.status());
                    if (r.digest() != null) {
                        row.put(TreeDigest.ALGORITHM, r.digest());
                    }
                }
            }
        }

        /** Adds "content_check" to the command's JSON object. */
        void addTo(Map<String, Object> out) {
            if (report == null) {
                return;
            }
            Map<String, Object> c = new LinkedHashMap<>();
            c.put("algorithm", TreeDigest.ALGORITHM);
            c.put("trusted", report.source());
            c.put("verified", report.verified());
            c.put("not_checked", report.tables().size() - report.verified());
            c.put("bytes", report.bytesChecked());
            c.put("trusted_s", trustedSeconds);
            c.put("check_s", report.seconds());
            c.put("gb_per_s", report.gbPerSecond());
            c.put("threads", report.threads());
            out.put("content_check", c);
        }
    }

    /**
     * Checks {@code imported} when asked (closing it and throwing on any difference); prints per-table results
     * and the time taken unless {@code json}.
     */
    Outcome verify(ImportedTables imported, boolean json) {
        if (sources == null || sources.isEmpty()) {
            return Outcome.NONE;
        }
        int n = threads > 0 ? threads : Runtime.getRuntime().availableProcessors();
        long t0 = System.nanoTime();
        ContentCheck.Trusted trusted;
        try {
            trusted = trusted(imported, n);
        } catch (RuntimeException e) {
            imported.close();
            throw e;
        }
        double trustedSeconds = (System.nanoTime() - t0) / 1e9;
        ContentCheck.Report report = ContentCheck.verify(imported, trusted, n);
        Map<String, ContentCheck.Result> byTable = new HashMap<>();
        report.tables().forEach(r -> byTable.put(r.table(), r));
        if (!json) {
            for (ContentCheck.Result r : report.tables()) {
                System.out.printf("content %-48s %s%s%n", r.table(), r.status(), r.digest() == null ? ""
                        : " " + r.digest());
            }
            System.out.printf("content check (%s): %d tables verified, %d not checked, against %s; %s checked in %.3f s"
                    + " (%.2f GB/s, %d threads)%s%n", TreeDigest.ALGORITHM, report.verified(),
                    report.tables().size() - report.verified(), report.source(), Bytes.format(report.bytesChecked()),
                    report.seconds(), report.gbPerSecond(), n, sources.stream().anyMatch(DigestSidecar::isSidecar) ? ""
                            : String.format("; trusted digests computed from the checkpoint in %.3f s", trustedSeconds));
        }
        return new Outcome(report, byTable, trustedSeconds);
    }

    private ContentCheck.Trusted trusted(ImportedTables imported, int n) {
        long sidecars = sources.stream().filter(DigestSidecar::isSidecar).count();
        if (sidecars == 0) {
            return ContentCheck.fromCheckpoint(sources, imported.tables().keySet(), n);
        }
        if (sidecars != sources.size()) {
            throw new IllegalArgumentException("--verify-content: give sidecars (*" + DigestSidecar.FILE_SUFFIX
                    + ") or a checkpoint, not both");
        }
        Map<String, String> all = new HashMap<>();
        for (Path p : sources) {
            ContentCheck.Trusted one = ContentCheck.fromSidecar(p);
            for (Map.Entry<String, String> e : one.digests().entrySet()) {
                String other = all.putIfAbsent(e.getKey(), e.getValue());
                if (other != null && !other.equals(e.getValue())) {
                    throw new IllegalArgumentException("--verify-content: the sidecars give table '" + e.getKey()
                            + "' two digests: " + other + " and " + e.getValue());
                }
            }
        }
        return new ContentCheck.Trusted(String.join(" ", sources.stream().map(Path::toString).toList()), all);
    }
}
