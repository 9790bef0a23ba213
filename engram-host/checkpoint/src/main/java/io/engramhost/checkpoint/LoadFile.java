package io.engramhost.checkpoint;

import io.engramhost.checkpoint.CheckpointLoader.ReadMode;
import io.engramhost.os.Arch;
import io.engramhost.os.DirFd;
import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.Mapping;
import io.engramhost.os.NativeException;
import io.engramhost.os.PageCache;
import io.engramhost.os.Posix;
import io.engramhost.os.RawMemory;
import java.nio.file.Path;

/**
 * One file of a {@link CheckpointLoader} load: the fd it was validated from, its page-cache view and a second open
 * with O_DIRECT (through {@code /proc/self/fd}, checked to be the same inode), both made on first need; owned by the
 * session. It decides which units are read with O_DIRECT and reads them through an aligned bounce buffer.
 */
final class LoadFile implements AutoCloseable {
    final Fd fd;
    PageCache.Residency residency;
    Fd direct;
    String directRefused;
    boolean tried;

    LoadFile(Fd fd) {
        this.fd = fd;
    }

    synchronized void prepare(ReadMode mode) {
        if (tried) {
            return;
        }
        long size = Posix.size(fd);
        if (mode == ReadMode.AUTO) {
            residency = PageCache.residency(fd, size);
        }
        if (mode != ReadMode.BUFFERED) {
            try {
                Fd d = Posix.open(Path.of("/proc/self/fd/" + fd.get()), Posix.O_RDONLY | Arch.current().oDirect(), 0);
                FileStat a = DirFd.stat(fd);
                FileStat b = DirFd.stat(d);
                if (a.dev() != b.dev() || a.ino() != b.ino()) {
                    d.close();
                    throw new CheckpointException(fd.what() + ": reopened for O_DIRECT through /proc/self/fd, but it"
                            + " is another file (dev/ino " + b.dev() + "/" + b.ino() + ", not " + a.dev() + "/"
                            + a.ino() + ")");
                }
                direct = d;
            } catch (NativeException e) {
                directRefused = e.getMessage(); // tmpfs and some others refuse O_DIRECT: read through the cache
            }
        }
        tried = true;
    }

    /**
     * Whether {@code [fileOffset, +len)} is read with O_DIRECT: where the file allows it, always in
     * {@link ReadMode#DIRECT}, else (AUTO) when less than half of its pages are in the page cache.
     */
    boolean readsDirect(ReadMode mode, long fileOffset, long len) {
        return direct != null && (mode == ReadMode.DIRECT
                || residency.residentPages(fileOffset, len) * 2 * Posix.pageSize() < len);
    }

    /** Reads {@code [offset, offset + len)} with O_DIRECT into {@code bounce} (aligned around it) and copies it to {@code at}. */
    void readDirect(Mapping bounce, long at, long len, long offset) {
        long alignedStart = offset / CheckpointLoader.DIRECT_ALIGN * CheckpointLoader.DIRECT_ALIGN;
        long head = offset - alignedStart;
        long want = (head + len + CheckpointLoader.DIRECT_ALIGN - 1) / CheckpointLoader.DIRECT_ALIGN
                * CheckpointLoader.DIRECT_ALIGN;
        long got = Posix.preadAtMost(direct, bounce.address(), want, alignedStart);
        if (got < head + len) {
            throw new NativeException("pread(" + direct.what() + " O_DIRECT, off=" + alignedStart + ")",
                    Errno.EIO, "unexpected end of file after " + (alignedStart + got) + " bytes");
        }
        RawMemory.copy(null, bounce.address() + head, null, at, len);
    }

    /** Throws when the file behind {@code fd} is now too short for {@code t}. */
    static void checkSize(Fd fd, TensorInfo t) {
        long size = Posix.size(fd);
        if (t.offset() + t.length() > size) {
            throw new CheckpointException(t.file() + ": tensor '" + t.name() + "': ends at byte "
                    + (t.offset() + t.length()) + " but the file now has " + size + " (changed since it was validated?)");
        }
    }

    @Override
    public void close() {
        try {
            if (residency != null) {
                residency.close();
            }
        } finally {
            if (direct != null) {
                direct.close();
            }
        }
    }
}
