package io.engramhost.protocol;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * {@code <socket>.ready}: written (atomically, by rename) once every table is loaded and sealed;
 * removed at start-up and on stop, so it never reports ready too early. Lines of {@code key=value}:
 * pid, fingerprint (SHA-256 hex), backend, socket.
 */
public final class ReadyFile {
    private ReadyFile() {
    }

    public static void write(Path file, int pid, String fingerprintSha256, String backend, Path socket) {
        String text = "pid=" + pid + "\nfingerprint=" + fingerprintSha256 + "\nbackend=" + backend + "\nsocket=" + socket + "\n";
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try {
            Files.writeString(tmp, text, StandardCharsets.UTF_8);
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write ready file " + file + ": " + e, e);
        }
    }

    /** The file's keys and values; empty when it does not exist. */
    public static Map<String, String> read(Path file) {
        Map<String, String> out = new LinkedHashMap<>();
        try {
            for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                int eq = line.indexOf('=');
                if (eq > 0) {
                    out.put(line.substring(0, eq), line.substring(eq + 1));
                }
            }
        } catch (java.nio.file.NoSuchFileException e) {
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read ready file " + file + ": " + e, e);
        }
        return out;
    }
}
