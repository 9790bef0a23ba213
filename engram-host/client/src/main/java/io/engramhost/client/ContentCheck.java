package io.engramhost.client;

import io.engramhost.checkpoint.DigestSidecar;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * A content check a client may demand after it has imported its tables, when the uid check and the seals
 * are not enough: it computes every CPU-readable table's {@value TreeDigest#ALGORITHM} digest over the
 * mapped bytes (all tables' 16 MiB leaves on N threads) and compares each with a digest it trusts, taken
 * from the checkpoint itself ({@link #fromCheckpoint}) or from a sidecar written by
 * {@code engram-host inspect --write-digests} ({@link #fromSidecar}). A table with another digest, or with
 * none trusted, fails the whole check: the tables are closed, never handed out, and a
 * {@link ContentMismatchException} names the table and both digests.
 *
 * <pre>{@code
 * ImportedTables tables = EngramClient.connect(socket, expectation, options);
 * ContentCheck.Report r = ContentCheck.verify(tables, ContentCheck.fromSidecar(sidecar), 16);
 * }</pre>
 *
 * Tables with no CPU view (device tensors; cuda-vmm host tables imported without a CPU view) are reported
 * as "not checked: not CPU-readable". Empty tables are checked (their digest is that of no bytes).
 */
public final class ContentCheck {
    /** The status of a table the check could not read. */
    public static final String NOT_CPU_READABLE = "not checked: not CPU-readable";
    public static final String VERIFIED = "verified";

    private ContentCheck() {
    }

    /** Digests to trust, by table name, and where they come from (for messages). */
    public record Trusted(String source, Map<String, String> digests) {
        public Trusted {
            Objects.requireNonNull(source, "source");
            digests = Map.copyOf(digests);
        }
    }

    /** One table's outcome: {@link #VERIFIED} or why it was not checked, and its digest when computed. */
    public record Result(String table, String status, String digest, long bytes) {
    }

    /** Every table's outcome, and what the check cost. */
    public record Report(List<Result> tables, long bytesChecked, double seconds, int threads, String source) {
        public long verified() {
            return tables.stream().filter(r -> r.status().equals(VERIFIED)).count();
        }

        public double gbPerSecond() {
            return seconds > 0 ? bytesChecked / seconds / 1e9 : 0;
        }
    }

    /** The digests of a sidecar file ({@link DigestSidecar#read}: strict; a malformed one throws, naming it). */
    public static Trusted fromSidecar(Path sidecar) {
        try {
            return new Trusted(sidecar.toString(), DigestSidecar.read(sidecar));
        } catch (IllegalArgumentException e) { // a malformed digest in the file
            throw new EngramClientException(e.getMessage(), e);
        } catch (RuntimeException e) {
            throw EngramClientException.of(e);
        }
    }

    /**
     * The digests of {@code tables} computed from the checkpoint at {@code paths}: each file opened once and
     * read through that fd on {@code threads} threads, and refused if it changed meanwhile. Names the
     * checkpoint does not hold are left out (the check then fails for them).
     */
    public static Trusted fromCheckpoint(List<Path> paths, Collection<String> tables, int threads) {
        Set<String> wanted = new HashSet<>(tables);
        try (OpenCheckpoint cp = OpenCheckpoint.open(paths)) {
            List<TensorInfo> chosen = cp.checkpoint().tensors().stream().filter(t -> wanted.contains(t.name())).toList();
            return new Trusted("checkpoint " + String.join(" ", paths.stream().map(Path::toString).toList()),
                    DigestSidecar.compute(cp, chosen, threads));
        } catch (RuntimeException e) {
            throw EngramClientException.of(e);
        }
    }

    /**
     * Checks every table of {@code imported} against {@code trusted} on {@code threads} threads. On any
     * mismatch, or a table with no trusted digest, closes {@code imported} and throws
     * {@link ContentMismatchException}; otherwise returns the report and leaves the tables open.
     */
    public static Report verify(ImportedTables imported, Trusted trusted, int threads) {
        long t0 = System.nanoTime();
        try {
            return check(imported, trusted, threads, t0);
        } catch (RuntimeException e) {
            imported.close();
            throw EngramClientException.of(e);
        } catch (Error e) {
            imported.close();
            throw e;
        }
    }

    private static Report check(ImportedTables imported, Trusted trusted, int threads, long t0) {
        List<String> problems = new ArrayList<>();
        for (TableView t : imported.tables().values()) {
            if (!trusted.digests().containsKey(t.name())) {
                problems.add("table '" + t.name() + "' has no trusted digest in " + trusted.source());
            }
        }
        if (!problems.isEmpty()) {
            throw failure(problems);
        }
        List<TableView> readable = new ArrayList<>();
        List<TreeDigest.Source> sources = new ArrayList<>();
        for (TableView t : imported.tables().values()) {
            if (t.hasCpuView()) {
                readable.add(t);
                sources.add(new TreeDigest.Memory(t.bytes() == 0 ? 0 : t.hostAddress(), t.bytes()));
            }
        }
        List<byte[]> digests = List.of();
        if (!readable.isEmpty()) {
            Guard guard = readable.get(0).guard(); // one guard keeps every mapping of an import alive
            guard.enter();
            try {
                digests = TreeDigest.digestAll(sources, threads);
            } finally {
                guard.exit();
            }
        }
        Map<String, String> computed = new LinkedHashMap<>();
        long bytes = 0;
        for (int i = 0; i < readable.size(); i++) {
            computed.put(readable.get(i).name(), TreeDigest.hex(digests.get(i)));
            bytes += readable.get(i).bytes();
        }
        List<Result> results = new ArrayList<>();
        for (TableView t : imported.tables().values()) {
            String mapped = computed.get(t.name());
            if (mapped == null) {
                results.add(new Result(t.name(), NOT_CPU_READABLE, null, t.bytes()));
                continue;
            }
            String expected = trusted.digests().get(t.name());
            if (!mapped.equals(expected)) {
                problems.add("table '" + t.name() + "': the mapped bytes have digest " + mapped + " but "
                        + trusted.source() + " says " + expected);
            }
            results.add(new Result(t.name(), VERIFIED, mapped, t.bytes()));
        }
        if (!problems.isEmpty()) {
            throw failure(problems);
        }
        return new Report(List.copyOf(results), bytes, (System.nanoTime() - t0) / 1e9, threads, trusted.source());
    }

    private static ContentMismatchException failure(List<String> problems) {
        String more = problems.size() == 1 ? "" : " (and " + (problems.size() - 1) + " more tables)";
        return new ContentMismatchException("content check (" + TreeDigest.ALGORITHM + ") failed: " + problems.get(0)
                + more + "; the tables were closed", problems);
    }
}
