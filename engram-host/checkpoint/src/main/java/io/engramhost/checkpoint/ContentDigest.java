package io.engramhost.checkpoint;

import io.engramhost.os.RawMemory;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Content hashes of table bytes. "engram digest v1": split the bytes into 64 MiB chunks (the last may be
 * shorter), take XXH64 (seed 0) of each, and XXH64 (seed 0) the concatenation of those 64-bit values written
 * little-endian. Empty content has no chunk, so its digest is XXH64 of nothing, 0xef46db3751d8e999. The
 * chunks are independent, so the parallel form gives the same value. Native-memory variants read through
 * Unsafe: the caller guarantees the range is mapped and readable for the whole call.
 */
public final class ContentDigest {
    public static final long CHUNK = 64L << 20;
    private static final int COPY = 1 << 20;

    private ContentDigest() {
    }

    /** engram digest v1 of native memory, on the calling thread. */
    public static long digest(long address, long length) {
        RawMemory.checkRange(address, length);
        return digest(null, address, length, CHUNK);
    }

    /** XXH64 (seed 0) of one chunk of native memory, as {@link #combine} takes it. */
    public static long chunkHash(long address, long length) {
        return Xxh64.hashMemory(address, length, 0);
    }

    /** engram digest v1 of a byte array. */
    public static long digest(byte[] data) {
        return digest(data, RawMemory.BYTE_ARRAY_BASE, data.length, CHUNK);
    }

    static long digest(Object base, long offset, long length, long chunk) {
        long[] hashes = new long[chunks(length, chunk)];
        for (int i = 0; i < hashes.length; i++) {
            long start = i * chunk;
            hashes[i] = Xxh64.hash(base, offset + start, Math.min(chunk, length - start), 0);
        }
        return combine(hashes);
    }

    private static int chunks(long length, long chunk) {
        return Math.toIntExact((length + chunk - 1) / chunk);
    }

    /** engram digest v1 of native memory, chunks hashed on {@code threads} threads; same value as digest(). */
    public static long digestParallel(long address, long length, int threads) {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, was " + threads);
        }
        ExecutorService pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "engram-digest");
            t.setDaemon(true);
            return t;
        });
        try {
            return digestParallel(address, length, pool);
        } finally {
            pool.shutdownNow();
        }
    }

    /** engram digest v1 of native memory, one task per chunk on {@code pool}. */
    public static long digestParallel(long address, long length, ExecutorService pool) {
        RawMemory.checkRange(address, length);
        return digestParallel(address, length, CHUNK, pool);
    }

    static long digestParallel(long address, long length, long chunk, ExecutorService pool) {
        int n = chunks(length, chunk);
        List<Future<Long>> parts = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            long start = i * chunk;
            long len = Math.min(chunk, length - start);
            parts.add(pool.submit(() -> Xxh64.hash(null, address + start, len, 0)));
        }
        long[] hashes = new long[n];
        try {
            for (int i = 0; i < n; i++) {
                hashes[i] = parts.get(i).get();
            }
        } catch (InterruptedException e) {
            parts.forEach(f -> f.cancel(false));
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while hashing", e);
        } catch (ExecutionException e) {
            throw new IllegalStateException("hashing a chunk failed: " + e.getCause(), e.getCause());
        }
        return combine(hashes);
    }

    /** engram digest v1 of {@code length} bytes of {@code file} from {@code offset}, streamed through 1 MiB. */
    public static long digest(Path file, long offset, long length) throws IOException {
        if (offset < 0 || length < 0) {
            throw new IllegalArgumentException("negative offset " + offset + " or length " + length);
        }
        long[] hashes = new long[chunks(length, CHUNK)];
        ByteBuffer buf = ByteBuffer.allocate(COPY);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            for (long start = 0; start < length; start += CHUNK) {
                Xxh64 h = new Xxh64(0);
                long end = Math.min(length, start + CHUNK);
                for (long p = start; p < end; ) {
                    buf.clear().limit((int) Math.min(COPY, end - p));
                    int n = ch.read(buf, offset + p);
                    if (n < 0) {
                        throw new IOException(file + ": ends at " + (offset + p) + ", before " + (offset + length));
                    }
                    h.update(buf.array(), 0, n);
                    p += n;
                }
                hashes[(int) (start / CHUNK)] = h.digest();
            }
        }
        return combine(hashes);
    }

    /** SHA-256 of native memory, copied through a reused 1 MiB array. */
    public static byte[] sha256(long address, long length) {
        RawMemory.checkRange(address, length);
        MessageDigest md;
        try {
            md = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
        byte[] buf = new byte[(int) Math.min(COPY, Math.max(length, 1))];
        for (long p = 0; p < length; p += buf.length) {
            int n = (int) Math.min(buf.length, length - p);
            RawMemory.copy(address + p, buf, 0, n);
            md.update(buf, 0, n);
        }
        return md.digest();
    }

    /** A digest as 16 lower-case hex digits. */
    public static String hex(long digest) {
        return String.format("%016x", digest);
    }

    /** True when {@code text} is 16 lower-case hex digits, the form {@link #hex} gives. */
    public static boolean isHex(String text) {
        return text != null && text.length() == 16 && text.chars().allMatch(ContentDigest::isHexDigit);
    }

    /** A lower-case hex digit. */
    static boolean isHexDigit(int c) {
        return c >= '0' && c <= '9' || c >= 'a' && c <= 'f';
    }

    /**
     * The digest of content whose 64 MiB chunks ({@link #CHUNK}; each XXH64 seed 0, {@link #chunkHash}) hash to
     * {@code chunkHashes}: XXH64 of them, little-endian. For content that arrives chunk by chunk (a peer's ranges).
     */
    public static long combine(long[] chunkHashes) {
        ByteBuffer hashes = ByteBuffer.allocate(8 * chunkHashes.length).order(ByteOrder.LITTLE_ENDIAN);
        for (long h : chunkHashes) {
            hashes.putLong(h);
        }
        return Xxh64.hash(hashes.array());
    }
}
