package io.engramhost.checkpoint;

import io.engramhost.json.JsonWriter;
import java.io.BufferedOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Writes one safetensors file, streaming: tensors are declared first (name, dtype, shape and their bytes or
 * a {@link Content} that writes them), then {@link #write} lays out the header (data in declaration order,
 * header padded with spaces to a multiple of 8) and streams each tensor through a 1 MiB buffer. The file
 * appears whole or not at all (written beside it, then renamed).
 */
public final class SafetensorsWriter {
    private static final int BUFFER = 1 << 20;

    /** Writes exactly the tensor's byte length to {@code out}. */
    @FunctionalInterface
    public interface Content {
        void writeTo(OutputStream out) throws IOException;
    }

    private record Entry(String name, DType dtype, long[] shape, long length, Content content) {
    }

    private final Map<String, String> metadata = new LinkedHashMap<>();
    private final List<Entry> entries = new ArrayList<>();
    private final Set<String> names = new HashSet<>();
    private long dataLength;

    /** Adds a {@code __metadata__} entry. */
    public SafetensorsWriter metadata(String key, String value) {
        metadata.put(key, value);
        return this;
    }

    public SafetensorsWriter add(String name, DType dtype, long[] shape, byte[] bytes) {
        long length = dtype.byteLength(shape);
        if (bytes.length != length) {
            throw new IllegalArgumentException("tensor '" + name + "': " + dtype + " " + Arrays.toString(shape)
                    + " needs " + length + " bytes, got " + bytes.length);
        }
        byte[] copy = bytes.clone();
        return add(name, dtype, shape, out -> out.write(copy));
    }

    /** Declares a tensor whose bytes {@code content} writes when the file is written. */
    public SafetensorsWriter add(String name, DType dtype, long[] shape, Content content) {
        if (name.isEmpty() || name.equals("__metadata__")) {
            throw new IllegalArgumentException("tensor name '" + name + "' is not allowed");
        }
        if (!names.add(name)) {
            throw new IllegalArgumentException("tensor '" + name + "' is already declared");
        }
        long length = dtype.byteLength(shape);
        entries.add(new Entry(name, dtype, shape.clone(), length, content));
        dataLength = Math.addExact(dataLength, length);
        return this;
    }

    /** Total bytes of tensor data declared so far. */
    public long dataLength() {
        return dataLength;
    }

    /** The JSON header as it will be written, padded to a multiple of 8 bytes. */
    public byte[] header() {
        Map<String, Object> root = new LinkedHashMap<>();
        if (!metadata.isEmpty()) {
            root.put("__metadata__", metadata);
        }
        long offset = 0;
        for (Entry e : entries) {
            Map<String, Object> t = new LinkedHashMap<>();
            t.put("dtype", e.dtype.name());
            t.put("shape", e.shape);
            t.put("data_offsets", new long[] {offset, offset + e.length});
            root.put(e.name, t);
            offset += e.length;
        }
        byte[] json = JsonWriter.write(root).getBytes(StandardCharsets.UTF_8);
        int padded = (json.length + 7) & ~7;
        byte[] out = Arrays.copyOf(json, padded);
        Arrays.fill(out, json.length, padded, (byte) ' ');
        return out;
    }

    /** Writes the file, as {@link #writeFile} does; returns {@code file}. */
    public Path write(Path file) throws IOException {
        byte[] header = header();
        return writeFile(file, out -> {
            out.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(header.length).array());
            out.write(header);
            for (Entry e : entries) {
                Bounded bounded = new Bounded(out, e);
                e.content.writeTo(bounded);
                if (bounded.written != e.length) {
                    throw new IOException("tensor '" + e.name + "': content wrote " + bounded.written
                            + " bytes, expected " + e.length);
                }
            }
        });
    }

    /**
     * Writes what {@code content} writes to {@code file} (mode 0644): into a new file beside it, buffered through
     * 1 MiB, then renamed over it, so that {@code file} appears whole or not at all and only its name is
     * replaced. Returns {@code file}.
     */
    public static Path writeFile(Path file, Content content) throws IOException {
        Path dir = file.toAbsolutePath().getParent();
        Path tmp = Files.createTempFile(dir, "." + file.getFileName(), ".tmp");
        boolean done = false;
        try {
            try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tmp), BUFFER)) {
                content.writeTo(out);
            }
            Files.setPosixFilePermissions(tmp, PosixFilePermissions.fromString("rw-r--r--"));
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            done = true;
            return file;
        } finally {
            if (!done) {
                Files.deleteIfExists(tmp);
            }
        }
    }

    /** Passes writes through, refusing any beyond the tensor's length; close does not close the file. */
    private static final class Bounded extends FilterOutputStream {
        private final Entry entry;
        long written;

        Bounded(OutputStream out, Entry entry) {
            super(out);
            this.entry = entry;
        }

        @Override
        public void write(int b) throws IOException {
            check(1);
            out.write(b);
            written++;
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            check(len);
            out.write(b, off, len);
            written += len;
        }

        private void check(long n) throws IOException {
            if (written + n > entry.length) {
                throw new IOException("tensor '" + entry.name + "': content wrote more than " + entry.length + " bytes");
            }
        }

        @Override
        public void close() {
        }
    }
}
