package io.engramhost.numa;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Optional;

/** Reads small sysfs and procfs files; every error names the file. */
final class Sysfs {
    private Sysfs() {
    }

    static String read(Path file) {
        return readIfExists(file).orElseThrow(() -> new NumaException(file + ": missing"));
    }

    /**
     * The file's text, or empty when it does not exist. Read with reads of 64 KiB, never of one byte: a
     * {@code /proc/sys} file reports size 0 and answers only a read at offset 0 (one at any later offset is
     * end of file), so {@code Files.readString}, which reads one byte to probe a file of size 0 and then the
     * rest, got "1" from a {@code vm.nr_hugepages} of 1024.
     */
    static Optional<String> readIfExists(Path file) {
        try (InputStream in = Files.newInputStream(file)) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[65536];
            for (int n; (n = in.read(buf, 0, buf.length)) > 0; ) {
                out.write(buf, 0, n);
            }
            return Optional.of(out.toString(StandardCharsets.US_ASCII));
        } catch (NoSuchFileException e) {
            return Optional.empty();
        } catch (IOException e) {
            throw new NumaException(file + ": cannot read: " + e, e);
        }
    }

    static long readLong(Path file) {
        return parseLong(read(file), file);
    }

    static long parseLong(String text, Path file) {
        String s = text.strip();
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new NumaException(file + ": '" + s + "' is not a number");
        }
    }
}
