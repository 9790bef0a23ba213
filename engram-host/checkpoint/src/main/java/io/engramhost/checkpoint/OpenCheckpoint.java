package io.engramhost.checkpoint;

import io.engramhost.os.Fd;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A checkpoint validated through file descriptors it keeps open, so that what is read later is what was
 * validated: each safetensors file is opened once ({@code O_RDONLY|O_CLOEXEC}), its header is read and
 * validated from that fd (the fingerprint's header SHA-256 comes from those bytes), and its tensors are
 * then read from the same fd ({@link CheckpointLoader#load(OpenCheckpoint, List, java.util.function.ToLongFunction)},
 * {@link TreeDigest}). A file renamed over or unlinked after the open cannot change what the fd reads;
 * a file written in place can, and {@link #checkUnchanged} tells: call it once everything is read.
 */
public final class OpenCheckpoint implements AutoCloseable {
    private final Checkpoint checkpoint;
    private final Map<Path, Fd> fds;

    private OpenCheckpoint(Checkpoint checkpoint, Map<Path, Fd> fds) {
        this.checkpoint = checkpoint;
        this.fds = fds;
    }

    /** Opens and validates {@code paths} as {@link Checkpoint#open(List)} does, keeping each file's fd open. */
    public static OpenCheckpoint open(List<Path> paths) {
        Map<Path, Fd> fds = new LinkedHashMap<>();
        List<Fd> opened = new ArrayList<>();
        try {
            Checkpoint cp = Checkpoint.open(paths, p -> {
                Fd fd = SafetensorsFile.openFd(p);
                opened.add(fd);
                SafetensorsFile f = SafetensorsFile.read(p, fd);
                fds.putIfAbsent(f.path(), fd);
                return f;
            });
            Map<Path, Fd> kept = new LinkedHashMap<>();
            for (SafetensorsFile f : cp.files()) {
                kept.put(f.path(), fds.get(f.path()));
            }
            for (Fd fd : opened) {
                if (!kept.containsValue(fd)) {
                    fd.close();
                }
            }
            return new OpenCheckpoint(cp, kept);
        } catch (RuntimeException | Error e) {
            for (Fd fd : opened) {
                try {
                    fd.close();
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }

    public static OpenCheckpoint open(Path... paths) {
        return open(List.of(paths));
    }

    public Checkpoint checkpoint() {
        return checkpoint;
    }

    /** The open fd of the file that holds {@code t}; not to be closed by the caller. */
    public Fd fd(TensorInfo t) {
        checkpoint.fileOf(t); // refuses a tensor of another checkpoint
        return fds.get(t.file());
    }

    /** The open fd of {@code f}, one of the checkpoint's files; not to be closed by the caller. */
    public Fd fd(SafetensorsFile f) {
        Fd fd = fds.get(f.path());
        if (fd == null || checkpoint.files().stream().noneMatch(x -> x == f)) {
            throw new IllegalArgumentException(f.path() + " is not a file of this checkpoint");
        }
        return fd;
    }

    /** How many files are held open. */
    public int fileCount() {
        return fds.size();
    }

    /**
     * Checks that no file changed since it was opened: through the fd, size, mtime and ctime are those
     * seen at the open and the header bytes (length prefix and JSON) are the same; and the path still names
     * that file (same device and inode: not renamed over, not removed). Throws one
     * {@link CheckpointException} line, "checkpoint PATH changed DURING (WHAT): CONSEQUENCE", naming the
     * first file that changed and what changed (and any other file that changed too).
     *
     * @param during      e.g. "during the load"
     * @param consequence e.g. "refusing to serve it; restart the daemon once the file is stable"
     */
    public void checkUnchanged(String during, String consequence) {
        List<String> found = new ArrayList<>();
        String first = null;
        for (SafetensorsFile f : checkpoint.files()) {
            List<String> what = changes(f, fds.get(f.path()));
            if (what.isEmpty()) {
                continue;
            }
            if (first == null) {
                first = "checkpoint " + f.path() + " changed " + during + " (" + String.join(", ", what) + ")";
            } else {
                found.add(f.path() + " (" + String.join(", ", what) + ")");
            }
        }
        if (first != null) {
            throw new CheckpointException(first + (found.isEmpty() ? "" : "; also changed: " + String.join(", ", found))
                    + ": " + consequence);
        }
    }

    /** What changed in {@code f} since it was opened on {@code fd}: empty when nothing did. */
    static List<String> changes(SafetensorsFile f, Fd fd) {
        List<String> what = new ArrayList<>();
        FileState before = f.opened();
        FileState now;
        try {
            now = FileState.of(fd);
        } catch (IOException e) {
            what.add("cannot stat the open file: " + e);
            return what;
        }
        what.addAll(now.changesSince(before));
        long headerEnd = f.dataOffset();
        if (now.size() < headerEnd) {
            what.add("header bytes (the file is now shorter than its header)");
        } else {
            try {
                // The length prefix, then the header hashed in pieces: never the whole header (up to 100 MiB)
                // on the heap, which a daemon that has just loaded a header that large may not have room for.
                byte[] prefix = SafetensorsFile.readBytes(f.path().toString(), fd, 0, 8);
                long n = ByteBuffer.wrap(prefix).order(ByteOrder.LITTLE_ENDIAN).getLong();
                if (n != f.headerLength() || !MessageDigest.isEqual(
                        SafetensorsFile.sha256(f.path().toString(), fd, 8, headerEnd - 8), f.headerSha256())) {
                    what.add("header bytes");
                }
            } catch (CheckpointException e) {
                what.add("header bytes unreadable: " + e.getMessage());
            }
        }
        try {
            FileState named = FileState.of(f.path());
            if (!named.sameFile(before)) {
                what.add("the path now names another file");
            }
        } catch (IOException e) {
            what.add(FileState.isMissing(e) ? "the path no longer exists" : "cannot stat the path: " + e);
        }
        return what;
    }

    /** Closes every fd; the first failure is rethrown once all are closed. */
    @Override
    public void close() {
        RuntimeException first = null;
        for (Fd fd : fds.values()) {
            try {
                fd.close();
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    @Override
    public String toString() {
        return "OpenCheckpoint[" + checkpoint + ", " + fds.size() + " fds]";
    }
}
