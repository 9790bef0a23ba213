package io.engramhost.checkpoint;

import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;
import java.util.function.LongConsumer;

/**
 * "engram content digest v2", algorithm {@value #ALGORITHM}: a SHA-256 tree over a table's bytes, the
 * digest a client can trust independently of the daemon (docs/checkpoints.md).
 * <pre>
 *   chunks = the bytes split into 16 MiB (16777216-byte) pieces, the last shorter; none when empty
 *   leaf_i = SHA-256(chunk_i)
 *   root   = SHA-256("engram-sha256-tree-v1" || u64le(total bytes) || u64le(16777216) || leaf_0 || leaf_1 ...)
 * </pre>
 * The root, as 64 lower-case hex digits, is the digest. Leaves are independent, so they are hashed on
 * several threads, across every table of one call ({@link #digestAll}); the value does not depend on the
 * number of threads. Native memory is read through {@link RawMemory}: the caller keeps it mapped for the
 * whole call. File regions are read with {@code pread} from an fd the caller keeps open.
 */
public final class TreeDigest {
    public static final String ALGORITHM = "sha256-tree-v1";
    /** The leaf size: 16 MiB. */
    public static final long CHUNK = 16L << 20;
    static final byte[] DOMAIN = "engram-sha256-tree-v1".getBytes(StandardCharsets.US_ASCII);
    /** Bytes copied at a time from native memory into the hashing buffer (stays in L2). */
    private static final int COPY = 256 << 10;

    private TreeDigest() {
    }

    /** Bytes to digest: native memory, or a region of an open file. */
    public sealed interface Source permits Memory, FileRegion {
        long length();
    }

    /** {@code length} bytes of native memory at {@code address} (0 allowed when empty). */
    public record Memory(long address, long length) implements Source {
        public Memory {
            RawMemory.checkRange(address, length);
        }
    }

    /** {@code length} bytes of the open file {@code fd} from {@code offset}; {@code what} names it in errors. */
    public record FileRegion(Fd fd, long offset, long length, String what) implements Source {
        public FileRegion {
            Objects.requireNonNull(fd, "fd");
            if (offset < 0 || length < 0 || offset + length < 0) {
                throw new IllegalArgumentException("file region [" + offset + ", +" + length + ") of " + what);
            }
        }
    }

    /** The digest of a byte array, on the calling thread. */
    public static byte[] digest(byte[] data) {
        MessageDigest md = sha256();
        int n = chunks(data.length, CHUNK);
        byte[][] leaves = new byte[n][];
        for (int i = 0; i < n; i++) {
            int start = (int) (i * CHUNK);
            md.update(data, start, (int) Math.min(CHUNK, data.length - start));
            leaves[i] = md.digest();
        }
        return root(md, data.length, leaves);
    }

    /** The digest of native memory, leaves hashed on {@code threads} threads. */
    public static byte[] digest(long address, long length, int threads) {
        return digestAll(List.of(new Memory(address, length)), threads).get(0);
    }

    /** The digest of {@code length} bytes of {@code fd} from {@code offset}, read with pread on {@code threads} threads. */
    public static byte[] digest(Fd fd, long offset, long length, int threads) {
        return digestAll(List.of(new FileRegion(fd, offset, length, fd.what())), threads).get(0);
    }

    /**
     * The digest of each source, in order: every leaf of every source is one task for {@code threads}
     * threads (the calling thread alone when 1). Throws {@link CheckpointException} naming the source of the
     * first read that failed.
     */
    public static List<byte[]> digestAll(List<? extends Source> sources, int threads) {
        List<byte[][]> leaves = leavesAll(sources, threads, done -> { });
        MessageDigest md = sha256();
        List<byte[]> out = new ArrayList<>(sources.size());
        for (int s = 0; s < sources.size(); s++) {
            out.add(root(md, sources.get(s).length(), leaves.get(s)));
        }
        return out;
    }

    /**
     * The leaves of each source, in order: the SHA-256 of each of its 16 MiB chunks (none when empty), every
     * chunk of every source one task for {@code threads} threads, as {@link #digestAll} hashes them.
     * {@code progress} is told each chunk's length once it is hashed (from the worker threads). Throws
     * {@link CheckpointException} naming the source of the first read that failed.
     */
    public static List<byte[][]> leavesAll(List<? extends Source> sources, int threads, LongConsumer progress) {
        Objects.requireNonNull(progress, "progress");
        List<Leaf> tasks = new ArrayList<>();
        byte[][][] leaves = new byte[sources.size()][][];
        for (int s = 0; s < sources.size(); s++) {
            Source src = sources.get(s);
            int n = chunks(src.length(), CHUNK);
            leaves[s] = new byte[n][];
            for (int c = 0; c < n; c++) {
                tasks.add(new Leaf(s, c, src, c * CHUNK, Math.min(CHUNK, src.length() - c * CHUNK)));
            }
        }
        runTasks(tasks.size(), threads, (i, w) -> {
            Leaf leaf = tasks.get(i);
            w.md.reset();
            w.hash(leaf.src, leaf.start, leaf.length, null);
            leaves[leaf.source][leaf.index] = w.md.digest();
            progress.accept(leaf.length);
        });
        return List.of(leaves);
    }

    /**
     * Both digests of each source, in order, from one read of its bytes: its engram digest v1
     * ({@link ContentDigest}) and its {@value #ALGORITHM}. The unit of work is one 64 MiB chunk of the engram
     * digest (four leaves of the tree), every unit of every source one task for {@code threads} threads; each
     * piece read is hashed by both. {@code progress} is told each unit's length once it is hashed. Throws
     * {@link CheckpointException} naming the source of the first read that failed.
     */
    public static List<TableDigests> bothAll(List<? extends Source> sources, int threads, LongConsumer progress) {
        Objects.requireNonNull(progress, "progress");
        List<Leaf> units = new ArrayList<>();
        byte[][][] leaves = new byte[sources.size()][][];
        long[][] chunkHashes = new long[sources.size()][];
        for (int s = 0; s < sources.size(); s++) {
            Source src = sources.get(s);
            leaves[s] = new byte[chunks(src.length(), CHUNK)][];
            int n = chunks(src.length(), ContentDigest.CHUNK);
            chunkHashes[s] = new long[n];
            for (int c = 0; c < n; c++) {
                long start = c * ContentDigest.CHUNK;
                units.add(new Leaf(s, c, src, start, Math.min(ContentDigest.CHUNK, src.length() - start)));
            }
        }
        runTasks(units.size(), threads, (i, w) -> {
            Leaf unit = units.get(i);
            Xxh64 xxh = new Xxh64(0);
            int first = (int) (unit.start / CHUNK);
            for (long p = 0; p < unit.length; p += CHUNK) {
                long n = Math.min(CHUNK, unit.length - p);
                w.md.reset();
                w.hash(unit.src, unit.start + p, n, xxh);
                leaves[unit.source][first + (int) (p / CHUNK)] = w.md.digest();
            }
            chunkHashes[unit.source][unit.index] = xxh.digest();
            progress.accept(unit.length);
        });
        MessageDigest md = sha256();
        List<TableDigests> out = new ArrayList<>(sources.size());
        for (int s = 0; s < sources.size(); s++) {
            out.add(TableDigests.of(ContentDigest.combine(chunkHashes[s]), root(md, sources.get(s).length(),
                    leaves[s])));
        }
        return out;
    }

    /** A digest as 64 lower-case hex digits. */
    public static String hex(byte[] digest) {
        return HexFormat.of().formatHex(digest);
    }

    /** True when {@code text} is 64 lower-case hex digits, the form digests are shown and stored in. */
    public static boolean isHex(String text) {
        return text != null && text.length() == 64 && text.chars().allMatch(ContentDigest::isHexDigit);
    }

    /** A piece of a source: its {@code index}-th chunk (of the size the caller splits it into). */
    private record Leaf(int source, int index, Source src, long start, long length) {
    }

    private static int chunks(long length, long chunk) {
        return Math.toIntExact((length + chunk - 1) / chunk);
    }

    /**
     * The digest of {@code total} bytes whose 16 MiB leaves (the SHA-256 of each chunk, in order) a caller hashed
     * itself, as they arrived: a seeded table's ranges (docs/seeding.md).
     */
    public static byte[] rootOf(long total, byte[][] leaves) {
        if (leaves.length != chunks(total, CHUNK)) {
            throw new IllegalArgumentException(leaves.length + " leaves for " + total + " bytes, not "
                    + chunks(total, CHUNK));
        }
        return root(sha256(), total, leaves);
    }

    static byte[] root(MessageDigest md, long total, byte[][] leaves) {
        md.reset();
        md.update(DOMAIN);
        ByteBuffer sizes = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putLong(total).putLong(CHUNK);
        md.update(sizes.array());
        for (byte[] leaf : leaves) {
            md.update(leaf);
        }
        return md.digest();
    }

    /** What each worker thread holds: a SHA-256, a copy buffer and, for file sources, a scratch mapping to pread into. */
    private static final class Worker implements WorkerThreads.Local {
        final MessageDigest md = sha256();
        private final byte[] buf = new byte[COPY];
        private Mapping scratch;

        /** Feeds {@code length} bytes of {@code src} from {@code start} to {@link #md} and, when not null, {@code xxh}. */
        void hash(Source src, long start, long length, Xxh64 xxh) {
            for (long p = 0; p < length; p += COPY) {
                int n = (int) Math.min(COPY, length - p);
                read(src, start + p, n);
                md.update(buf, 0, n);
                if (xxh != null) {
                    xxh.update(buf, 0, n);
                }
            }
        }

        /** Copies {@code n} bytes of {@code src} from {@code at} (within the source) into {@link #buf}. */
        private void read(Source src, long at, int n) {
            if (src instanceof Memory m) {
                RawMemory.copy(m.address() + at, buf, 0, n);
                return;
            }
            FileRegion f = (FileRegion) src;
            if (scratch == null) {
                scratch = Posix.mmapAnonymous(COPY, "digest buffer");
            }
            long offset = f.offset() + at;
            try {
                Posix.preadFully(f.fd(), scratch.address(), n, offset);
            } catch (RuntimeException e) {
                throw new CheckpointException(f.what() + ": reading " + n + " bytes at offset " + offset + ": "
                        + e.getMessage(), e);
            }
            RawMemory.copy(scratch.address(), buf, 0, n);
        }

        @Override
        public void close() {
            if (scratch != null) {
                scratch.close();
            }
        }
    }

    private static void runTasks(int count, int threads, WorkerThreads.Task<Worker> task) {
        WorkerThreads.forEach(count, threads, "digest", Worker::new, task);
    }

    static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }
}
