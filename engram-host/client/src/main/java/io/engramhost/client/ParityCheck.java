package io.engramhost.client;

import io.engramhost.checkpoint.Glob;
import io.engramhost.checkpoint.OpenCheckpoint;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.checkpoint.TreeDigest;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.LongConsumer;

/**
 * The parity check of {@code engram-host verify}: every resident table, read through its mapping, against
 * the same tensor read from the checkpoint's files through their fds. Nothing recorded is trusted (neither
 * the manifest's digests nor a sidecar): both sides are hashed here, in {@value TreeDigest#CHUNK}-byte
 * chunks (SHA-256, every chunk of both sides one task for N threads), and for each chunk whose hashes differ
 * the bytes are compared to find the first byte that differs. Tables missing on either side, and tables whose
 * dtype, shape or size differ, are mismatches too.
 *
 * <pre>{@code
 * try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults());
 *      OpenCheckpoint cp = OpenCheckpoint.open(paths)) {
 *     ParityCheck.Report r = ParityCheck.check(t, cp, List.of(), 8, bytes -> { });
 * }
 * }</pre>
 *
 * Tables with no CPU view (device tensors; cuda-vmm tables imported without one) cannot be read here: they
 * are listed as not checked, and are no mismatch.
 */
public final class ParityCheck {
    /** Bytes compared at a time when looking for the first differing byte of a chunk. */
    private static final int COMPARE = 256 << 10;

    private ParityCheck() {
    }

    /** What was found for one table. */
    public enum Status {
        /** Every byte equal. */
        EQUAL("equal"),
        /** Some bytes differ: {@link TableResult#offsets()} holds the first differing byte of each differing chunk. */
        DIFFERS("differs"),
        /** Dtype, shape or size differ; the bytes were not compared when the sizes differ. */
        LAYOUT_DIFFERS("layout differs"),
        /** Resident, but the checkpoint has no such tensor. */
        MISSING_FROM_CHECKPOINT("missing from checkpoint"),
        /** In the checkpoint (and selected), but not resident. */
        NOT_RESIDENT("not resident"),
        /** Resident, but with no CPU view, so not read. */
        NOT_CHECKED("not checked: no CPU view");

        private final String text;

        Status(String text) {
            this.text = text;
        }

        public String text() {
            return text;
        }

        /** True for every outcome that fails the check. */
        public boolean mismatch() {
            return this != EQUAL && this != NOT_CHECKED;
        }
    }

    /**
     * One table's outcome. {@code offsets}: for {@link Status#DIFFERS}, the table-relative offset of the first
     * differing byte of each differing chunk, in order; {@code detail}: what differs, for the other mismatches.
     */
    public record TableResult(String table, Status status, long bytes, List<Long> offsets, String detail) {
        public TableResult {
            Objects.requireNonNull(table, "table");
            Objects.requireNonNull(status, "status");
            offsets = List.copyOf(offsets);
        }
    }

    /** Every table's outcome, and what the check cost; {@code bytesCompared} counts each table once. */
    public record Report(List<TableResult> tables, long bytesCompared, double seconds, int threads) {
        public List<TableResult> mismatches() {
            return tables.stream().filter(t -> t.status().mismatch()).toList();
        }

        public long count(Status s) {
            return tables.stream().filter(t -> t.status() == s).count();
        }

        public boolean ok() {
            return mismatches().isEmpty();
        }

        public double gbPerSecond() {
            return seconds > 0 ? bytesCompared / seconds / 1e9 : 0;
        }
    }

    /** The bytes {@link #check} will hash: twice the size of every table it compares. */
    public static long bytesToHash(ImportedTables imported, OpenCheckpoint checkpoint, List<String> globs) {
        long n = 0;
        for (Pair p : pairs(imported, checkpoint, selector(globs))) {
            n += 2 * p.view.bytes();
        }
        return n;
    }

    /**
     * Compares the tables of {@code imported} selected by {@code globs} (all when empty) with the same tensors
     * of {@code checkpoint}, on {@code threads} threads; {@code progress} is told the bytes of each chunk hashed
     * (both sides count, see {@link #bytesToHash}). Leaves {@code imported} open.
     */
    public static Report check(ImportedTables imported, OpenCheckpoint checkpoint, List<String> globs, int threads,
            LongConsumer progress) {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        long t0 = System.nanoTime();
        List<Glob> selector = selector(globs);
        Map<String, TableResult> results = new LinkedHashMap<>();
        Map<String, TensorInfo> onDisk = new LinkedHashMap<>();
        for (TensorInfo t : checkpoint.checkpoint().tensors()) {
            if (selected(selector, t.name())) {
                onDisk.put(t.name(), t);
            }
        }
        for (TableView v : imported.tables().values()) {
            if (!selected(selector, v.name())) {
                continue;
            }
            TensorInfo t = onDisk.get(v.name());
            if (t == null) {
                results.put(v.name(), new TableResult(v.name(), Status.MISSING_FROM_CHECKPOINT, v.bytes(), List.of(),
                        "the checkpoint has no tensor of that name"));
            } else if (!v.hasCpuView()) {
                results.put(v.name(), new TableResult(v.name(), Status.NOT_CHECKED, v.bytes(), List.of(),
                        v.entry().kind().backend() + (v.entry().device() >= 0 ? " on GPU " + v.entry().device() : "")));
            } else if (v.bytes() != t.length()) {
                results.put(v.name(), new TableResult(v.name(), Status.LAYOUT_DIFFERS, v.bytes(), List.of(),
                        "resident " + v.bytes() + " bytes, checkpoint " + t.length() + " bytes"));
            } else {
                results.put(v.name(), null); // compared below
            }
        }
        for (TensorInfo t : onDisk.values()) {
            if (!imported.tables().containsKey(t.name())) {
                results.put(t.name(), new TableResult(t.name(), Status.NOT_RESIDENT, t.length(), List.of(),
                        "the daemon does not serve it"));
            }
        }
        List<Pair> pairs = pairs(imported, checkpoint, selector);
        long bytes = 0;
        if (!pairs.isEmpty()) {
            Guard guard = pairs.get(0).view.guard(); // one guard keeps every mapping of an import alive
            guard.enter();
            try {
                List<TreeDigest.Source> sources = new ArrayList<>();
                for (Pair p : pairs) {
                    sources.add(new TreeDigest.Memory(p.view.bytes() == 0 ? 0 : p.view.hostAddress(), p.view.bytes()));
                    sources.add(new TreeDigest.FileRegion(checkpoint.fd(p.tensor), p.tensor.offset(), p.tensor.length(),
                            p.tensor.file().toString()));
                }
                List<byte[][]> leaves = TreeDigest.leavesAll(sources, threads, progress);
                try (Mapping scratch = Posix.mmapAnonymous(COMPARE, "verify buffer")) {
                    for (int i = 0; i < pairs.size(); i++) {
                        Pair p = pairs.get(i);
                        byte[][] mapped = leaves.get(2 * i);
                        byte[][] file = leaves.get(2 * i + 1);
                        List<Long> offsets = new ArrayList<>();
                        for (int c = 0; c < mapped.length; c++) {
                            if (!MessageDigest.isEqual(mapped[c], file[c])) {
                                offsets.add(firstDifference(p, checkpoint.fd(p.tensor), c, scratch));
                            }
                        }
                        bytes += p.view.bytes();
                        results.put(p.view.name(), layoutOrBytes(p, offsets));
                    }
                }
            } finally {
                guard.exit();
            }
        }
        return new Report(List.copyOf(results.values()), bytes, (System.nanoTime() - t0) / 1e9, threads);
    }

    private record Pair(TableView view, TensorInfo tensor) {
    }

    private static List<Pair> pairs(ImportedTables imported, OpenCheckpoint checkpoint, List<Glob> selector) {
        Map<String, TensorInfo> byName = new LinkedHashMap<>();
        for (TensorInfo t : checkpoint.checkpoint().tensors()) {
            byName.put(t.name(), t);
        }
        List<Pair> out = new ArrayList<>();
        for (TableView v : imported.tables().values()) {
            TensorInfo t = byName.get(v.name());
            if (t != null && selected(selector, v.name()) && v.hasCpuView() && v.bytes() == t.length()) {
                out.add(new Pair(v, t));
            }
        }
        return out;
    }

    private static TableResult layoutOrBytes(Pair p, List<Long> offsets) {
        String name = p.view.name();
        boolean sameLayout = p.view.dtype().equals(p.tensor.dtype().name()) && Arrays.equals(p.view.shape(),
                p.tensor.shape());
        if (!sameLayout) {
            return new TableResult(name, Status.LAYOUT_DIFFERS, p.view.bytes(), offsets, "resident " + p.view.dtype()
                    + Arrays.toString(p.view.shape()) + ", checkpoint " + p.tensor.dtype().name()
                    + Arrays.toString(p.tensor.shape()) + (offsets.isEmpty() ? "; the bytes are equal" : "; the bytes differ"));
        }
        return offsets.isEmpty() ? new TableResult(name, Status.EQUAL, p.view.bytes(), List.of(), "")
                : new TableResult(name, Status.DIFFERS, p.view.bytes(), offsets, offsets.size()
                        + (offsets.size() == 1 ? " chunk differs" : " chunks differ"));
    }

    /** The table-relative offset of the first byte of chunk {@code c} where mapping and file differ. */
    private static long firstDifference(Pair p, Fd fd, int c, Mapping scratch) {
        long start = c * TreeDigest.CHUNK;
        long end = Math.min(p.view.bytes(), start + TreeDigest.CHUNK);
        byte[] mapped = new byte[COMPARE];
        byte[] file = new byte[COMPARE];
        for (long at = start; at < end; at += COMPARE) {
            int n = (int) Math.min(COMPARE, end - at);
            RawMemory.copy(p.view.hostAddress() + at, mapped, 0, n);
            Posix.preadFully(fd, scratch.address(), n, p.tensor.offset() + at);
            RawMemory.copy(scratch.address(), file, 0, n);
            int i = Arrays.mismatch(mapped, 0, n, file, 0, n);
            if (i >= 0) {
                return at + i;
            }
        }
        // The hashes differed but the bytes now agree: one side changed between the two reads.
        throw new IllegalStateException("table " + p.view.name() + ": chunk " + c + " hashed differently but its bytes"
                + " are now equal: the checkpoint file (or the table) changed during the check");
    }

    private static List<Glob> selector(List<String> globs) {
        return globs.stream().map(Glob::of).toList();
    }

    private static boolean selected(List<Glob> selector, String name) {
        return selector.isEmpty() || selector.stream().anyMatch(g -> g.matches(name));
    }
}
