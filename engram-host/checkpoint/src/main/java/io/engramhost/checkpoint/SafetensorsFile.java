package io.engramhost.checkpoint;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * One validated safetensors file: an 8-byte little-endian header length n, n bytes of JSON header, then
 * the data section. {@link #open} checks everything (see {@link SafetensorsHeader}) before any tensor is
 * exposed, so a TensorInfo from here always lies inside the file and covers exactly dtype x shape bytes.
 * Holds no open file: it is a description.
 */
public final class SafetensorsFile {
    /** The largest header accepted, as in the reference implementation (100 MiB). */
    public static final long MAX_HEADER_LENGTH = 100L << 20;

    private final Path path;
    private final long fileSize;
    private final long headerLength;
    private final byte[] headerSha256;
    private final Map<String, String> metadata;
    private final Map<String, TensorInfo> tensors;

    private SafetensorsFile(Path path, long fileSize, long headerLength, byte[] headerSha256,
            Map<String, String> metadata, Map<String, TensorInfo> tensors) {
        this.path = path;
        this.fileSize = fileSize;
        this.headerLength = headerLength;
        this.headerSha256 = headerSha256;
        this.metadata = metadata;
        this.tensors = tensors;
    }

    /** Reads and validates the header of {@code path}; throws {@link CheckpointException} naming the problem. */
    public static SafetensorsFile open(Path path) {
        String where = path.toString();
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < 8) {
                throw new CheckpointException(where + ": file is " + size
                        + " bytes, too short for the 8-byte header length");
            }
            ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            readFully(ch, len, 0);
            long n = len.getLong(0);
            if (n < 0 || n > MAX_HEADER_LENGTH) {
                throw new CheckpointException(where + ": header length " + Long.toUnsignedString(n)
                        + " exceeds the limit of " + MAX_HEADER_LENGTH + " bytes (100 MiB)");
            }
            if (8 + n > size) {
                throw new CheckpointException(where + ": header length " + n + " runs past the end of the file ("
                        + size + " bytes)");
            }
            ByteBuffer header = ByteBuffer.allocate((int) n);
            readFully(ch, header, 8);
            byte[] bytes = header.array();
            long dataOffset = 8 + n;
            SafetensorsHeader parsed = SafetensorsHeader.parse(where, path, bytes, dataOffset, size - dataOffset);
            Map<String, TensorInfo> byName = new TreeMap<>();
            for (TensorInfo t : parsed.tensors()) {
                byName.put(t.name(), t);
            }
            return new SafetensorsFile(path, size, n, sha256(bytes), parsed.metadata(),
                    Collections.unmodifiableMap(byName));
        } catch (NoSuchFileException e) {
            throw new CheckpointException(where + ": no such file", e);
        } catch (IOException e) {
            throw new CheckpointException(where + ": cannot read: " + e, e);
        }
    }

    private static void readFully(FileChannel ch, ByteBuffer buf, long position) throws IOException {
        while (buf.hasRemaining()) {
            int n = ch.read(buf, position + buf.position());
            if (n < 0) {
                throw new IOException("unexpected end of file at " + (position + buf.position()));
            }
        }
    }

    static byte[] sha256(byte[] bytes) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(bytes);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
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
