package io.engramhost.checkpoint;

import io.engramhost.os.Fd;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * What {@code stat(2)} says of a file at one moment: device and inode (which file it is), its type,
 * size, and status-change and modification times in nanoseconds. {@link #of(Fd)} describes an open
 * descriptor ({@code /proc/self/fd/N}, which the kernel resolves to the open file itself, even once the
 * file is renamed or unlinked); {@link #of(Path)} describes what a path names now (following
 * symlinks, as {@code open} does).
 */
record FileState(long dev, long ino, boolean regular, long size, long ctimeNanos, long mtimeNanos) {
    private static final String ATTRIBUTES = "unix:dev,ino,mode,size,ctime,lastModifiedTime";
    private static final int S_IFMT = 0170000;
    private static final int S_IFREG = 0100000;

    /** The open file behind {@code fd}. */
    static FileState of(Fd fd) throws IOException {
        return read(Path.of("/proc/self/fd/" + fd.get()));
    }

    /** The file {@code path} names now; NoSuchFileException when it names nothing. */
    static FileState of(Path path) throws IOException {
        return read(path);
    }

    private static FileState read(Path p) throws IOException {
        Map<String, Object> a = Files.readAttributes(p, ATTRIBUTES);
        int mode = (Integer) a.get("mode");
        return new FileState(((Number) a.get("dev")).longValue(), ((Number) a.get("ino")).longValue(),
                (mode & S_IFMT) == S_IFREG, ((Number) a.get("size")).longValue(), nanos((FileTime) a.get("ctime")),
                nanos((FileTime) a.get("lastModifiedTime")));
    }

    private static long nanos(FileTime t) {
        return t.to(TimeUnit.NANOSECONDS);
    }

    boolean sameFile(FileState other) {
        return dev == other.dev && ino == other.ino;
    }

    /** What differs from {@code before} among size, mtime and ctime (in that order); empty when none. */
    List<String> changesSince(FileState before) {
        List<String> out = new ArrayList<>();
        if (size != before.size) {
            out.add("size " + before.size + " -> " + size + " bytes");
        }
        if (mtimeNanos != before.mtimeNanos) {
            out.add("mtime");
        }
        if (ctimeNanos != before.ctimeNanos) {
            out.add("ctime");
        }
        return out;
    }

    static boolean isMissing(IOException e) {
        return e instanceof NoSuchFileException;
    }
}
