package io.engramhost.checkpoint;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/** Writes safetensors files byte by byte, including malformed ones, for tests. */
final class RawSafetensors {
    private RawSafetensors() {
    }

    /** The header text as given (with its true length), then {@code dataBytes} bytes 0, 1, 2, ... */
    static Path write(Path file, String header, int dataBytes) {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        byte[] data = new byte[dataBytes];
        for (int i = 0; i < dataBytes; i++) {
            data[i] = (byte) i;
        }
        return write(file, h.length, h, data);
    }

    /** A declared header length, then the raw bytes that follow it. */
    static Path write(Path file, long declaredLength, byte[] header, byte[] data) {
        ByteBuffer buf = ByteBuffer.allocate(8 + header.length + data.length).order(ByteOrder.LITTLE_ENDIAN);
        buf.putLong(declaredLength).put(header).put(data);
        try {
            return Files.write(file, buf.array());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** One tensor entry as JSON. */
    static String tensor(String name, String dtype, String shape, long begin, long end) {
        return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + begin
                + "," + end + "]}";
    }
}
