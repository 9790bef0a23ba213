package io.engramhost.numa;

import java.io.IOException;
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

    static Optional<String> readIfExists(Path file) {
        try {
            return Optional.of(Files.readString(file, StandardCharsets.US_ASCII));
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
