package io.engramhost.bench;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.RawMemory;
import io.engramhost.protocol.Expectation;
import java.util.Arrays;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import net.openhft.chronicle.bytes.Bytes;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * CPU gather of {@code batch} random rows of {@code rowBytes} bytes from one imported table (served by an
 * in-process daemon, mapped read-only and prefaulted) into a byte[]. Ours: the client's TableView
 * ({@code readRows}, {@code copy} per row) and its Chronicle view; baseline: Unsafe.copyMemory from the
 * same addresses. One op = one batch; the row ids cycle through {@code BATCHES} pre-drawn batches.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 4, time = 1)
@Fork(3)
public class GatherBench {
    static final int BATCHES = 256;

    @Param({"64", "264", "1024"})
    public int rowBytes;

    /** Table size in MiB: 4 stays in cache (shows per-row overhead), 256 is past it (rows come from DRAM). */
    @Param({"4", "256"})
    public int tableMiB;

    /** Rows per op. */
    @Param({"1024"})
    public int batch;

    private InProcessDaemon daemon;
    private ImportedTables imported;
    private TableView view;
    private TableView.ChronicleView chronicle;
    private Bytes<Void> bytes;
    private long base;
    private long[][] rowIds;
    private byte[] dst;
    private int next;

    @Setup(Level.Trial)
    public void setUp() {
        QuietDaemonLog.install();
        long rows = ((long) tableMiB << 20) / rowBytes;
        daemon = InProcessDaemon.start(() -> BenchTables.build(1, rows, rowBytes, PageKind.SMALL));
        imported = EngramClient.connect(daemon.socket(), Expectation.sha256(BenchTables.fingerprintHex(1, rows, rowBytes)),
                ClientOptions.defaults().withPopulate(true).withName("engram-bench"));
        view = imported.table(BenchTables.name(0));
        chronicle = view.openBytes();
        bytes = chronicle.bytes();
        base = bytes.addressForRead(0);
        SplittableRandom random = new SplittableRandom(42);
        rowIds = new long[BATCHES][batch];
        for (long[] ids : rowIds) {
            for (int i = 0; i < ids.length; i++) {
                ids[i] = random.nextLong(rows);
            }
        }
        dst = new byte[batch * rowBytes];
        checkAllPathsAgree();
    }

    /** Every path must copy exactly the baseline's bytes, or the comparison means nothing. */
    void checkAllPathsAgree() {
        byte[] expected = unsafeCopy().clone();
        next = 0;
        String[] names = {"readRows", "copy", "chronicle"};
        byte[][] got = {tableViewReadRows().clone(), resetThen(this::tableViewCopy), resetThen(this::chronicleRead)};
        for (int i = 0; i < got.length; i++) {
            if (!Arrays.equals(expected, got[i])) {
                throw new IllegalStateException("gather via " + names[i] + " differs from the Unsafe baseline");
            }
        }
        next = 0;
    }

    private byte[] resetThen(Supplier<byte[]> path) {
        next = 0;
        return path.get().clone();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        chronicle.close();
        imported.close();
        daemon.close();
    }

    private long[] nextBatch() {
        long[] ids = rowIds[next];
        next = (next + 1) & (BATCHES - 1);
        return ids;
    }

    /** Ours: one bounds and liveness check for the batch, then one copy per row. */
    @Benchmark
    public byte[] tableViewReadRows() {
        view.readRows(nextBatch(), dst);
        return dst;
    }

    /** Ours: TableView.copy per row (checks each row). */
    @Benchmark
    public byte[] tableViewCopy() {
        long[] ids = nextBatch();
        int rb = rowBytes;
        for (int i = 0; i < ids.length; i++) {
            view.copy(ids[i] * rb, dst, i * rb, rb);
        }
        return dst;
    }

    /** Ours: the Chronicle Bytes view (positioned reads, checked by Chronicle). */
    @Benchmark
    public byte[] chronicleRead() {
        long[] ids = nextBatch();
        int rb = rowBytes;
        for (int i = 0; i < ids.length; i++) {
            bytes.read(ids[i] * rb, dst, i * rb, rb);
        }
        return dst;
    }

    /** Baseline: Unsafe.copyMemory from the same addresses, no checks. */
    @Benchmark
    public byte[] unsafeCopy() {
        long[] ids = nextBatch();
        int rb = rowBytes;
        for (int i = 0; i < ids.length; i++) {
            RawMemory.copy(base + ids[i] * rb, dst, i * rb, rb);
        }
        return dst;
    }
}
