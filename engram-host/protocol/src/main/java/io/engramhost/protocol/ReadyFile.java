package io.engramhost.protocol;

import io.engramhost.os.DirFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * {@code <socket>.ready}: written (atomically, by rename) once every table is loaded and sealed;
 * removed at start-up and on stop, so it never reports ready too early. Lines of {@code key=value}:
 * pid, fingerprint (SHA-256 hex), backend, socket.
 *
 * <p>The writer never follows a symlink: it works through the socket directory's fd. It removes a stale
 * {@code <socket>.ready.tmp} with {@code unlinkat} (a symlink there is removed, not followed), creates a
 * fresh one with {@code O_CREAT|O_EXCL|O_NOFOLLOW}, writes and fsyncs it, and renames it over
 * {@code <socket>.ready} with {@code renameat} (which replaces a symlink there rather than writing through
 * it).
 */
public final class ReadyFile {
    private ReadyFile() {
    }

    /**
     * Writes the ready file {@code name} in the directory {@code dir} (the daemon's checked socket
     * directory).
     *
     * @throws IllegalStateException naming the file and the failed call; a stale temporary file that cannot
     *     be removed is named with its type and owner
     */
    public static void write(DirFd dir, String name, int pid, String fingerprintSha256, String backend, Path socket) {
        String text = "pid=" + pid + "\nfingerprint=" + fingerprintSha256 + "\nbackend=" + backend + "\nsocket=" + socket
                + "\n";
        String tmp = name + ".tmp";
        try {
            dir.unlink(tmp);
        } catch (NativeException e) {
            FileStat st = dir.statAt(tmp);
            throw new IllegalStateException("cannot write ready file " + dir.resolve(name) + ": cannot remove the stale "
                    + dir.resolve(tmp) + (st == null ? "" : " (" + st.typeName() + " owned by uid " + st.uid() + ")") + ": "
                    + e.getMessage(), e);
        }
        boolean created = false;
        try {
            try (Fd fd = dir.openFile(tmp, DirFd.O_WRONLY | Posix.O_CREAT | DirFd.O_EXCL, 0644)) {
                created = true;
                DirFd.writeFully(fd, text.getBytes(StandardCharsets.UTF_8), 0);
                DirFd.fsync(fd);
            }
            dir.rename(tmp, name);
        } catch (NativeException e) {
            if (created) {
                try {
                    dir.unlink(tmp);
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw new IllegalStateException("cannot write ready file " + dir.resolve(name) + ": " + e.getMessage(), e);
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
