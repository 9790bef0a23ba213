package io.engramhost.os;

import static io.engramhost.os.internal.LibCHolder.LIBC;
import static io.engramhost.os.internal.LibCHolder.RUNTIME;
import static io.engramhost.os.internal.LibCMoreHolder.MORE;

import io.engramhost.os.internal.LibCHolder;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * Owns an fd of one directory and reaches the files in it only through that fd ({@code openat},
 * {@code mkdirat}, {@code unlinkat}, {@code renameat}, {@code statx}), never following a symlink at the
 * name it is given: once a directory has been opened and checked, a rename or a symlink planted along
 * its path cannot redirect what is done in it. Names are single path components.
 *
 * <p>{@code O_DIRECTORY} and {@code O_NOFOLLOW} are the two open flags whose values differ between
 * x86-64 and aarch64 (arm64 has its own {@code asm/fcntl.h}); this class holds both.
 */
public final class DirFd implements AutoCloseable {
    public static final int O_WRONLY = 01;
    public static final int O_EXCL = 0200;
    /** {@code O_PATH}: the same on x86-64 and aarch64. */
    public static final int O_PATH = 010000000;
    /** {@code O_DIRECTORY}: 0200000 on x86-64, 040000 on aarch64. */
    public static final int O_DIRECTORY = Arch.current() == Arch.AARCH64 ? 040000 : 0200000;
    /** {@code O_NOFOLLOW}: 0400000 on x86-64, 0100000 on aarch64. */
    public static final int O_NOFOLLOW = Arch.current() == Arch.AARCH64 ? 0100000 : 0400000;
    public static final int ENOTDIR = 20;
    public static final int EISDIR = 21;
    public static final int ELOOP = 40;
    private static final int ENOTEMPTY = 39;
    private static final int AT_FDCWD = -100;
    private static final int AT_SYMLINK_NOFOLLOW = 0x100;
    private static final int AT_REMOVEDIR = 0x200;
    private static final int AT_EMPTY_PATH = 0x1000;
    private static final int STATX_BASIC_STATS = 0x7ff;
    private static final int STATX_BYTES = 256;

    private final Fd fd;
    private final Path path;

    private DirFd(Fd fd, Path path) {
        this.fd = fd;
        this.path = path;
    }

    /**
     * Opens the directory {@code dir} without following a symlink at its last component
     * ({@code O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC}); symlinks in the components before it are followed.
     *
     * @throws NativeException naming open: ELOOP when {@code dir} is a symlink, ENOTDIR when it is no
     *     directory, ENOENT, EACCES
     */
    public static DirFd open(Path dir) {
        return openAt(AT_FDCWD, dir.toString(), dir, O_NOFOLLOW);
    }

    /** Opens {@code dir}, following a symlink anywhere in it (a parent the user named, such as /var/run). */
    public static DirFd openFollowing(Path dir) {
        return openAt(AT_FDCWD, dir.toString(), dir, 0);
    }

    /** The directory {@code name} in this one, without following a symlink there. */
    public DirFd openDir(String name) {
        return openAt(fd.get(), checkName(name), path.resolve(name), O_NOFOLLOW);
    }

    /** This directory's parent ({@code ..}); the root's parent is the root. */
    public DirFd parent() {
        Path p = path.getParent();
        return openAt(fd.get(), "..", p == null ? path : p, 0);
    }

    private static DirFd openAt(int dirfd, String name, Path path, int extra) {
        int raw = MORE.openat(dirfd, name, Posix.O_RDONLY | O_DIRECTORY | Posix.O_CLOEXEC | extra, 0);
        if (raw < 0) {
            int errno = LibCHolder.errno();
            boolean noFollow = (extra & O_NOFOLLOW) != 0;
            String call = "open(" + path + ", O_DIRECTORY" + (noFollow ? "|O_NOFOLLOW" : "") + ")";
            if (noFollow && (errno == ELOOP || errno == ENOTDIR) && isSymlink(dirfd, name)) {
                // the kernel says ENOTDIR or ELOOP, depending on the order of its checks: say ELOOP
                throw new NativeException(call, ELOOP, path + " is a symbolic link, which is not followed");
            }
            throw new NativeException(call, errno);
        }
        return new DirFd(Fd.adopt(raw, "directory " + path), path);
    }

    private static boolean isSymlink(int dirfd, String name) {
        Pointer buf = Memory.allocateDirect(RUNTIME, STATX_BYTES, true);
        return MORE.statx(dirfd, name, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, buf) == 0 && decode(buf).isSymlink();
    }

    /**
     * mkdirat with {@code mode} (the umask applies). True when this call created it; false when
     * something already has that name (EEXIST), whatever it is.
     */
    public boolean mkdir(String name, int mode) {
        if (MORE.mkdirat(fd.get(), checkName(name), mode) == 0) {
            return true;
        }
        int errno = LibCHolder.errno();
        if (errno == Errno.EEXIST) {
            return false;
        }
        throw new NativeException("mkdir(" + path.resolve(name) + ", 0" + Integer.toOctalString(mode) + ")", errno);
    }

    /**
     * openat(this, name, flags | O_NOFOLLOW | O_CLOEXEC, mode): a symlink at {@code name} is never
     * followed (ELOOP; with O_CREAT|O_EXCL, EEXIST).
     */
    public Fd openFile(String name, int flags, int mode) {
        int raw = MORE.openat(fd.get(), checkName(name), flags | O_NOFOLLOW | Posix.O_CLOEXEC, mode);
        if (raw < 0) {
            int errno = LibCHolder.errno();
            throw new NativeException("open(" + path.resolve(name) + ", " + openFlags(flags) + ")", errno,
                    errno == ELOOP ? path.resolve(name) + " is a symbolic link, which is not followed" : null);
        }
        return Fd.adopt(raw, path.resolve(name).toString());
    }

    private static String openFlags(int flags) {
        StringBuilder b = new StringBuilder((flags & 3) == Posix.O_RDWR ? "O_RDWR" : (flags & 3) == O_WRONLY ? "O_WRONLY"
                : "O_RDONLY");
        if ((flags & Posix.O_CREAT) != 0) {
            b.append("|O_CREAT");
        }
        if ((flags & O_EXCL) != 0) {
            b.append("|O_EXCL");
        }
        return b.append("|O_NOFOLLOW").toString();
    }

    /** statx of this directory. */
    public FileStat stat() {
        return stat(fd);
    }

    /** statx of the file {@code fd} is open on. */
    public static FileStat stat(FdRef fd) {
        Pointer buf = Memory.allocateDirect(RUNTIME, STATX_BYTES, true);
        if (MORE.statx(fd.get(), "", AT_EMPTY_PATH, STATX_BASIC_STATS, buf) != 0) {
            throw new NativeException("statx(" + fd.what() + ")", LibCHolder.errno());
        }
        return decode(buf);
    }

    /** statx of {@code name} in this directory, not following a symlink; null when nothing has that name. */
    public FileStat statAt(String name) {
        Pointer buf = Memory.allocateDirect(RUNTIME, STATX_BYTES, true);
        if (MORE.statx(fd.get(), checkName(name), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, buf) != 0) {
            int errno = LibCHolder.errno();
            if (errno == Errno.ENOENT) {
                return null;
            }
            throw new NativeException("statx(" + path.resolve(name) + ", AT_SYMLINK_NOFOLLOW)", errno);
        }
        return decode(buf);
    }

    /*
     * struct statx: u32 mask @0, u32 blksize @4, u64 attributes @8, u32 nlink @16, u32 uid @20,
     * u32 gid @24, u16 mode @28, u64 ino @32, u64 size @40, ..., u32 dev_major @136, u32 dev_minor @140.
     * The same on every architecture.
     */
    private static FileStat decode(Pointer b) {
        int mode = b.getShort(28) & 0xffff;
        long dev = ((long) b.getInt(136) << 32) | (b.getInt(140) & 0xffffffffL);
        return new FileStat(mode & FileStat.S_IFMT, mode & 07777, b.getInt(20), b.getInt(24), b.getInt(16) & 0xffffffffL,
                b.getLong(40), dev, b.getLong(32));
    }

    /** unlinkat(this, name, 0): removes the name itself (a symlink, not its target). False when absent. */
    public boolean unlink(String name) {
        if (MORE.unlinkat(fd.get(), checkName(name), 0) == 0) {
            return true;
        }
        int errno = LibCHolder.errno();
        if (errno == Errno.ENOENT) {
            return false;
        }
        throw new NativeException("unlink(" + path.resolve(name) + ")", errno);
    }

    /**
     * unlinkat(this, name, AT_REMOVEDIR): removes the empty directory {@code name} (a symlink there is not followed:
     * ENOTDIR). False when absent or not empty (ENOENT, ENOTEMPTY, EEXIST): nothing is removed then.
     */
    public boolean rmdir(String name) {
        if (MORE.unlinkat(fd.get(), checkName(name), AT_REMOVEDIR) == 0) {
            return true;
        }
        int errno = LibCHolder.errno();
        if (errno == Errno.ENOENT || errno == ENOTEMPTY || errno == Errno.EEXIST) {
            return false;
        }
        throw new NativeException("rmdir(" + path.resolve(name) + ")", errno);
    }

    /** renameat(this, from, this, to): replaces whatever {@code to} names (a symlink there is replaced, not followed). */
    public void rename(String from, String to) {
        if (MORE.renameat(fd.get(), checkName(from), fd.get(), checkName(to)) != 0) {
            throw new NativeException("rename(" + path.resolve(from) + ", " + path.resolve(to) + ")", LibCHolder.errno());
        }
    }

    /** fchmod of this directory. */
    public void chmod(int mode) {
        if (MORE.fchmod(fd.get(), mode) != 0) {
            throw new NativeException("fchmod(" + path + ", 0" + Integer.toOctalString(mode) + ")", LibCHolder.errno());
        }
    }

    /** fchmod of the file {@code fd} is open on. */
    public static void chmod(FdRef fd, int mode) {
        if (MORE.fchmod(fd.get(), mode) != 0) {
            throw new NativeException("fchmod(" + fd.what() + ", 0" + Integer.toOctalString(mode) + ")", LibCHolder.errno());
        }
    }

    /**
     * Changes the mode of {@code name} in this directory without following a symlink there: the name is
     * opened with {@code O_PATH|O_NOFOLLOW}, checked to be no symlink, and changed through
     * {@code /proc/self/fd} (what glibc's {@code fchmodat(AT_SYMLINK_NOFOLLOW)} does). Where /proc is not
     * mounted, the name is changed directly once {@code statx} without following has shown it is the same
     * file and no symlink. Returns what was changed, as it was before.
     *
     * @throws NativeException ELOOP when {@code name} is a symlink
     */
    public FileStat chmodNoFollow(String name, int mode) {
        try (Fd p = openFile(name, O_PATH, 0)) {
            FileStat st = stat(p);
            if (st.isSymlink()) {
                throw new NativeException("chmod(" + path.resolve(name) + ")", ELOOP, path.resolve(name)
                        + " is a symbolic link, which is not followed");
            }
            String proc = "/proc/self/fd/" + p.get();
            if (MORE.fchmodat(AT_FDCWD, proc, mode, 0) == 0) {
                return st;
            }
            int errno = LibCHolder.errno();
            if (errno != Errno.ENOENT || Files.isDirectory(Path.of("/proc/self/fd"))) {
                throw new NativeException("chmod(" + path.resolve(name) + ", 0" + Integer.toOctalString(mode) + ")", errno);
            }
            FileStat now = statAt(name);
            if (now == null || !now.sameFile(st) || now.isSymlink()) {
                throw new NativeException("chmod(" + path.resolve(name) + ")", Errno.ENOENT, path.resolve(name)
                        + " was replaced while its mode was being set");
            }
            if (MORE.fchmodat(fd.get(), name, mode, 0) != 0) {
                throw new NativeException("chmod(" + path.resolve(name) + ", 0" + Integer.toOctalString(mode) + ")",
                        LibCHolder.errno());
            }
            return st;
        }
    }

    /** fsync(fd), retrying EINTR. */
    public static void fsync(FdRef fd) {
        while (MORE.fsync(fd.get()) != 0) {
            int errno = LibCHolder.errno();
            if (errno != Errno.EINTR) {
                throw new NativeException("fsync(" + fd.what() + ")", errno);
            }
        }
    }

    /** Writes all of {@code bytes} at {@code offset} of {@code fd}. */
    public static void writeFully(FdRef fd, byte[] bytes, long offset) {
        if (bytes.length == 0) {
            return;
        }
        Pointer buf = Memory.allocateDirect(RUNTIME, bytes.length, false);
        buf.put(0, bytes, 0, bytes.length);
        Posix.pwriteFully(fd, buf.address(), bytes.length, offset);
    }

    /** Up to {@code max} bytes from the start of {@code fd} (fewer when the file is shorter). */
    public static byte[] readUpTo(FdRef fd, int max) {
        Pointer buf = Memory.allocateDirect(RUNTIME, Math.max(1, max), false);
        long done = 0;
        while (done < max) {
            long n = MORE.pread(fd.get(), buf.address() + done, max - done, done);
            if (n < 0) {
                int errno = LibCHolder.errno();
                if (errno == Errno.EINTR) {
                    continue;
                }
                throw new NativeException("pread(" + fd.what() + ")", errno);
            }
            if (n == 0) {
                break;
            }
            done += n;
        }
        byte[] out = new byte[(int) done];
        buf.get(0, out, 0, out.length);
        return out;
    }

    /** The effective uid of this process: the owner of what it creates. */
    public static int geteuid() {
        return LIBC.geteuid();
    }

    /**
     * Where this directory really is, as the kernel names it ({@code /proc/self/fd}): symlinks in the
     * path it was opened by are resolved. The path it was opened by where /proc is not mounted.
     */
    public Path realPath() {
        try {
            return Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd.get()));
        } catch (IOException | UnsupportedOperationException e) {
            return path;
        }
    }

    /** The path this directory was opened by (for messages). */
    public Path path() {
        return path;
    }

    /** {@code path().resolve(name)}, for messages. */
    public Path resolve(String name) {
        return path.resolve(checkName(name));
    }

    /** The directory's fd, which this object keeps owning. */
    public BorrowedFd fd() {
        return fd.borrow();
    }

    public boolean isOpen() {
        return fd.isOpen();
    }

    @Override
    public void close() {
        fd.close();
    }

    private static String checkName(String name) {
        if (name.isEmpty() || name.equals(".") || name.equals("..") || name.indexOf('/') >= 0 || name.indexOf('\0') >= 0) {
            throw new IllegalArgumentException("'" + name + "' is not a single file name");
        }
        return name;
    }

    @Override
    public String toString() {
        return "DirFd[" + path + "]";
    }
}
