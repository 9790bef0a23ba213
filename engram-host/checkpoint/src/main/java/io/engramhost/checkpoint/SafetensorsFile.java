package io.engramhost.checkpoint;

import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.LongConsumer;

/**
 * One validated safetensors file: an 8-byte little-endian header length n, n bytes of JSON header, then
 * the data section. {@link #open} checks everything (see {@link SafetensorsHeader}) before any tensor is
 * exposed, so a TensorInfo from here always lies inside the file and covers exactly dtype x shape bytes.
 * Holds no open file: it is a description (an {@link OpenCheckpoint} keeps the fd it was read from).
 */
public final class SafetensorsFile {
    /** The largest header accepted, as in the reference implementation (100 MiB). */
    public static final long MAX_HEADER_LENGTH = 100L << 20;
    /** O_NONBLOCK, the same number on x86-64 and aarch64: opening a FIFO by mistake must not hang. */
    private static final int O_NONBLOCK = 0x800;

    private final Path path;
    private final long fileSize;
    private final long headerLength;
    private final byte[] headerSha256;
    private final Map<String, String> metadata;
    private final Map<String, TensorInfo> tensors;
    private final FileState opened;

    private SafetensorsFile(Path path, long fileSize, long headerLength, byte[] headerSha256,
            Map<String, String> metadata, Map<String, TensorInfo> tensors, FileState opened) {
        this.path = path;
        this.fileSize = fileSize;
        this.headerLength = headerLength;
        this.headerSha256 = headerSha256;
        this.metadata = metadata;
        this.tensors = tensors;
        this.opened = opened;
    }

    /**
     * Reads and validates the header of {@code path}; throws {@link CheckpointException} naming the problem.
     * The file is opened once ({@code O_RDONLY|O_CLOEXEC}) and closed before this returns.
     */
    public static SafetensorsFile open(Path path) {
        try (Fd fd = openFd(path)) {
            return read(path, fd);
        }
    }

    /** Opens {@code path} for reading: O_RDONLY, O_CLOEXEC, and O_NONBLOCK so that a FIFO cannot hang us. */
    static Fd openFd(Path path) {
        try {
            return Posix.open(path, Posix.O_RDONLY | O_NONBLOCK, 0);
        } catch (NativeException e) {
            if (e.errno() == Errno.ENOENT) {
                throw new CheckpointException(path + ": no such file", e);
            }
            throw new CheckpointException(path + ": cannot open: " + e.getMessage(), e);
        }
    }

    /**
     * Validates the safetensors file open on {@code fd} ({@code path} names it in messages): its size comes
     * from {@code fstat} of the fd, its header from positioned reads of the fd, and the state of the file
     * at that moment is kept ({@link #opened()}) so a later check can tell whether it changed.
     */
    static SafetensorsFile read(Path path, Fd fd) {
        String where = path.toString();
        FileState state;
        try {
            state = FileState.of(fd);
        } catch (IOException e) {
            throw new CheckpointException(where + ": cannot stat the open file: " + e, e);
        }
        if (!state.regular()) {
            throw new CheckpointException(where + ": not a regular file");
        }
        long size = state.size();
        if (size < 8) {
            throw new CheckpointException(where + ": file is " + size
                    + " bytes, too short for the 8-byte header length");
        }
        byte[] prefix = readBytes(where, fd, 0, 8);
        long n = ByteBuffer.wrap(prefix).order(ByteOrder.LITTLE_ENDIAN).getLong();
        if ((n < 0 || n > MAX_HEADER_LENGTH || 8 + n > size)
                && (size == 8 || readBytes(where, fd, 8, 1)[0] != '{')) {
            throw new CheckpointException(where + ": not a safetensors file (its first 8 bytes, " + text(prefix)
                    + " = " + HexFormat.of().formatHex(prefix) + ", are not a header length followed by a JSON"
                    + " object): give a .safetensors file, an index or a model directory");
        }
        if (n < 0 || n > MAX_HEADER_LENGTH) {
            throw new CheckpointException(where + ": header length " + Long.toUnsignedString(n)
                    + " exceeds the limit of " + MAX_HEADER_LENGTH + " bytes (100 MiB)");
        }
        if (8 + n > size) {
            throw new CheckpointException(where + ": header length " + n + " runs past the end of the file ("
                    + size + " bytes)");
        }
        byte[] bytes = readBytes(where, fd, 8, (int) n);
        long dataOffset = 8 + n;
        SafetensorsHeader parsed = SafetensorsHeader.parse(where, path, bytes, dataOffset, size - dataOffset);
        Map<String, TensorInfo> byName = new TreeMap<>(FingerprintCodec::compareNames);
        for (TensorInfo t : parsed.tensors()) {
            byName.put(t.name(), t);
        }
        return new SafetensorsFile(path, size, n, sha256(bytes), parsed.metadata(),
                Collections.unmodifiableMap(byName), state);
    }

    /** {@code bytes} as text in quotes, each byte outside printable ASCII shown as '.'. */
    private static String text(byte[] bytes) {
        StringBuilder sb = new StringBuilder("\"");
        for (byte b : bytes) {
            sb.append(b >= 0x20 && b < 0x7f && b != '"' ? (char) b : '.');
        }
        return sb.append('"').toString();
    }

    /** {@code length} bytes of {@code fd} at {@code offset}, by pread through a scratch mapping. */
    static byte[] readBytes(String where, Fd fd, long offset, int length) {
        byte[] out = new byte[length];
        if (length == 0) {
            return out;
        }
        try (Mapping scratch = Posix.mmapAnonymous(length, "header of " + where)) {
            Posix.preadFully(fd, scratch.address(), length, offset);
            RawMemory.copy(scratch.address(), out, 0, length);
        } catch (NativeException e) {
            throw new CheckpointException(where + ": cannot read " + length + " bytes at offset " + offset + ": "
                    + e.getMessage(), e);
        }
        return out;
    }

    /**
     * SHA-256 of {@code length} bytes of {@code fd} at {@code offset}, read in pieces of at most 1 MiB: a
     * header of up to 100 MiB is hashed again without holding it whole on the heap.
     */
    static byte[] sha256(String where, Fd fd, long offset, long length) {
        return sha256(where, fd, offset, length, done -> { });
    }

    /** As {@link #sha256(String, Fd, long, long)}, telling {@code progress} each piece's length once hashed. */
    static byte[] sha256(String where, Fd fd, long offset, long length, LongConsumer progress) {
        MessageDigest md = newSha256();
        if (length == 0) {
            return md.digest();
        }
        int piece = (int) Math.min(length, 1 << 20);
        byte[] buf = new byte[piece];
        try (Mapping scratch = Posix.mmapAnonymous(piece, "header of " + where)) {
            for (long done = 0; done < length; ) {
                int n = (int) Math.min(piece, length - done);
                Posix.preadFully(fd, scratch.address(), n, offset + done);
                RawMemory.copy(scratch.address(), buf, 0, n);
                md.update(buf, 0, n);
                done += n;
                progress.accept(n);
            }
        } catch (NativeException e) {
            throw new CheckpointException(where + ": cannot read " + length + " bytes at offset " + offset + ": "
                    + e.getMessage(), e);
        }
        return md.digest();
    }

    private static MessageDigest newSha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    static byte[] sha256(byte[] bytes) {
        return newSha256().digest(bytes);
    }

    public Path path() {
        return path;
    }

    /** The file's base name, e.g. {@code model-00001-of-00002.safetensors}. */
    public String fileName() {
        return path.getFileName().toString();
    }

    public long fileSize() {
        return fileSize;
    }

    /** n: the length of the JSON header in bytes (padding included). */
    public long headerLength() {
        return headerLength;
    }

    /** Where the data section starts: 8 + n. */
    public long dataOffset() {
        return 8 + headerLength;
    }

    public long dataLength() {
        return fileSize - dataOffset();
    }

    /** SHA-256 of the n raw header bytes (not of the length prefix). A copy. */
    public byte[] headerSha256() {
        return headerSha256.clone();
    }

    public String headerSha256Hex() {
        return HexFormat.of().formatHex(headerSha256);
    }

    /** The file's state when it was opened, before its header was read. */
    FileState opened() {
        return opened;
    }

    /** {@code __metadata__}, or an empty map. */
    public Map<String, String> metadata() {
        return metadata;
    }

    /** The tensors, ordered by name. */
    public List<TensorInfo> tensors() {
        return List.copyOf(tensors.values());
    }

    /** The tensor named {@code name}, or null. */
    public TensorInfo tensor(String name) {
        return tensors.get(name);
    }

    @Override
    public String toString() {
        return "SafetensorsFile[" + path + ", " + tensors.size() + " tensors, " + fileSize + " bytes]";
    }
}
