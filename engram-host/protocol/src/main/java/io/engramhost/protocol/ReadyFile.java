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
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code <socket>.ready}: written (atomically, by rename) once every table is loaded and sealed;
 * removed at start-up and on stop, so it never reports ready too early. Lines of {@code key=value}:
 * pid, fingerprint (SHA-256 hex), backend, socket.
 *
 * <p>The writer never follows a symlink and never replaces what is not its own: it works through the socket
 * directory's fd, creates a temporary file of a name of its own ({@code <socket>.ready.tmp-PID-N}) with
 * {@code O_CREAT|O_EXCL|O_NOFOLLOW}, writes and fsyncs it, and renames it over {@code <socket>.ready} with
 * {@code renameat} only while nothing is there or what is there is a ready file ({@link #notOurs}); anything else
 * there is refused and left alone.
 */
public final class ReadyFile {
    /** The most a ready file holds: four short lines. */
    private static final int MAX_BYTES = 4096;
    private static final AtomicLong TMP = new AtomicLong();

    private ReadyFile() {
    }

    /**
     * Writes the ready file {@code name} in the directory {@code dir} (the daemon's checked socket
     * directory).
     *
     * @throws IllegalStateException naming the file and the failed call, or what is at {@code name} that is not a
     *     ready file (left as it is)
     */
    public static void write(DirFd dir, String name, int pid, String fingerprintSha256, String backend, Path socket) {
        String text = "pid=" + pid + "\nfingerprint=" + fingerprintSha256 + "\nbackend=" + backend + "\nsocket=" + socket
                + "\n";
        String tmp = name + ".tmp-" + Posix.getpid() + "-" + TMP.incrementAndGet();
        boolean created = false;
        try {
            try (Fd fd = dir.openFile(tmp, DirFd.O_WRONLY | Posix.O_CREAT | DirFd.O_EXCL, 0644)) {
                created = true;
                DirFd.writeFully(fd, text.getBytes(StandardCharsets.UTF_8), 0);
                DirFd.fsync(fd);
            }
            String notOurs = notOurs(dir, name);
            if (notOurs != null) {
                throw new IllegalStateException(notOurs);
            }
            dir.rename(tmp, name);
        } catch (NativeException | IllegalStateException e) {
            if (created) {
                try {
                    dir.unlink(tmp);
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e instanceof IllegalStateException ise ? ise
                    : new IllegalStateException("cannot write ready file " + dir.resolve(name) + ": " + e.getMessage(), e);
        }
    }

    /**
     * Why the file at {@code name} in {@code dir} is not a ready file the daemon may replace or remove (null: nothing
     * is there, or it is one: a regular file of this uid or root, at most 4 KiB, of {@code key=value} lines with the
     * keys pid, fingerprint, backend and socket, each once). A symlink is not followed.
     */
    public static String notOurs(DirFd dir, String name) {
        FileStat st = dir.statAt(name);
        if (st == null) {
            return null;
        }
        Path p = dir.resolve(name);
        String refuse = ": refusing to replace it; remove it yourself if it is not needed, or give --socket another"
                + " path";
        if (!st.isRegular()) {
            return p + " is " + st.typeName() + ", not an engram-host ready file" + refuse;
        }
        if (st.uid() != DirFd.geteuid() && st.uid() != 0) {
            return p + " belongs to uid " + st.uid() + ", not to this daemon's uid or root" + refuse;
        }
        if (st.size() > MAX_BYTES) {
            return p + " holds " + st.size() + " bytes, not an engram-host ready file" + refuse;
        }
        byte[] b;
        try (Fd fd = dir.openFile(name, Posix.O_RDONLY | Posix.O_NONBLOCK, 0)) {
            b = DirFd.readUpTo(fd, MAX_BYTES);
        } catch (NativeException e) {
            return "cannot read " + p + " to tell whether it is a ready file: " + e.getMessage() + refuse;
        }
        Set<String> keys = new HashSet<>();
        String text = new String(b, StandardCharsets.UTF_8);
        for (String line : text.split("\n", -1)) {
            if (line.isEmpty()) {
                continue;
            }
            int eq = line.indexOf('=');
            String key = eq > 0 ? line.substring(0, eq) : "";
            String value = eq > 0 ? line.substring(eq + 1) : "";
            boolean valid = switch (key) {
                case "pid" -> value.matches("\\d{1,10}");
                case "fingerprint" -> value.matches("[0-9a-f]{64}");
                case "backend" -> value.matches("[a-z0-9-]{1,32}");
                case "socket" -> !value.isEmpty();
                default -> false;
            };
            if (!valid || !keys.add(key)) {
                return p + " is not an engram-host ready file (it holds " + b.length + " bytes of other content)"
                        + refuse;
            }
        }
        return keys.contains("pid") ? null : p + " is not an engram-host ready file (no pid line)" + refuse;
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
        } catch (NoSuchFileException e) {
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read ready file " + file + ": " + e, e);
        }
        return out;
    }
}
