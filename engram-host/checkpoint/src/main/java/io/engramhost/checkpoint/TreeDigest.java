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
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
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
        int n = chunks(data.length);
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
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        List<Leaf> tasks = new ArrayList<>();
        byte[][][] leaves = new byte[sources.size()][][];
        for (int s = 0; s < sources.size(); s++) {
            Source src = sources.get(s);
            int n = chunks(src.length());
            leaves[s] = new byte[n][];
            for (int c = 0; c < n; c++) {
                tasks.add(new Leaf(s, c, src, c * CHUNK, Math.min(CHUNK, src.length() - c * CHUNK)));
            }
        }
        hashLeaves(tasks, leaves, Math.min(threads, Math.max(tasks.size(), 1)), progress);
        return List.of(leaves);
    }

    /** A digest as 64 lower-case hex digits. */
    public static String hex(byte[] digest) {
        return HexFormat.of().formatHex(digest);
    }

    /** True when {@code text} is 64 lower-case hex digits, the form digests are shown and stored in. */
    public static boolean isHex(String text) {
        return text != null && text.length() == 64 && text.chars().allMatch(c -> c >= '0' && c <= '9' || c >= 'a' && c <= 'f');
    }

    private record Leaf(int source, int index, Source src, long start, long length) {
    }

    private static int chunks(long length) {
        return Math.toIntExact((length + CHUNK - 1) / CHUNK);
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

    private static void hashLeaves(List<Leaf> tasks, byte[][][] leaves, int threads, LongConsumer progress) {
        AtomicInteger next = new AtomicInteger();
        AtomicReference<RuntimeException> failure = new AtomicReference<>();
        Runnable worker = () -> {
            MessageDigest md = sha256();
            byte[] buf = new byte[COPY];
            Mapping scratch = null;
            try {
                while (failure.get() == null) {
                    int i = next.getAndIncrement();
                    if (i >= tasks.size()) {
                        return;
                    }
                    Leaf leaf = tasks.get(i);
                    if (leaf.src instanceof FileRegion && scratch == null) {
                        scratch = Posix.mmapAnonymous(COPY, "digest buffer");
                    }
                    leaves[leaf.source][leaf.index] = hashLeaf(md, buf, scratch, leaf);
                    progress.accept(leaf.length);
                }
            } catch (RuntimeException | Error e) {
                failure.compareAndSet(null, e instanceof CheckpointException ce ? ce
                        : new CheckpointException("digest: " + e.getMessage(), e));
            } finally {
                if (scratch != null) {
                    scratch.close();
                }
            }
        };
        if (threads <= 1) {
            worker.run();
        } else {
            // stop handing out leaves, but wait: a read in flight still runs
            WorkerThreads.runAll(threads, "engram-digest-", worker,
                    () -> failure.compareAndSet(null, new CheckpointException("digest interrupted")));
        }
        if (failure.get() != null) {
            throw failure.get();
        }
    }

    private static byte[] hashLeaf(MessageDigest md, byte[] buf, Mapping scratch, Leaf leaf) {
        md.reset();
        for (long p = 0; p < leaf.length; p += COPY) {
            int n = (int) Math.min(COPY, leaf.length - p);
            if (leaf.src instanceof Memory m) {
                RawMemory.copy(m.address() + leaf.start + p, buf, 0, n);
            } else {
                FileRegion f = (FileRegion) leaf.src;
                long at = f.offset() + leaf.start + p;
                try {
                    Posix.preadFully(f.fd(), scratch.address(), n, at);
                } catch (RuntimeException e) {
                    throw new CheckpointException(f.what() + ": reading " + n + " bytes at offset " + at + ": "
                            + e.getMessage(), e);
                }
                RawMemory.copy(scratch.address(), buf, 0, n);
            }
            md.update(buf, 0, n);
        }
        return md.digest();
    }

    static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }
}
