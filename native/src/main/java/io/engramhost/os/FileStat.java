package io.engramhost.os;

/**
 * What {@code statx(2)} says of one file: its type, permission bits, owner, link count and identity.
 * Taken through an fd, or through a directory fd without following a symlink ({@link DirFd}), so it
 * describes the very file that was opened or named, never what a symlink points at.
 *
 * @param type the {@code S_IFMT} bits of {@code st_mode} ({@link #S_IFREG}, {@link #S_IFDIR}, ...)
 * @param mode the permission bits of {@code st_mode}, sticky, setuid and setgid included ({@code 07777})
 */
public record FileStat(int type, int mode, int uid, int gid, long nlink, long size, long dev, long ino) {
    public static final int S_IFMT = 0170000;
    public static final int S_IFSOCK = 0140000;
    public static final int S_IFLNK = 0120000;
    public static final int S_IFREG = 0100000;
    public static final int S_IFBLK = 0060000;
    public static final int S_IFDIR = 0040000;
    public static final int S_IFCHR = 0020000;
    public static final int S_IFIFO = 0010000;
    public static final int S_ISVTX = 01000;

    public boolean isDirectory() {
        return type == S_IFDIR;
    }

    public boolean isRegular() {
        return type == S_IFREG;
    }

    public boolean isSymlink() {
        return type == S_IFLNK;
    }

    public boolean isCharDevice() {
        return type == S_IFCHR;
    }

    public boolean isSocket() {
        return type == S_IFSOCK;
    }

    public boolean sticky() {
        return (mode & S_ISVTX) != 0;
    }

    /** Group or others may write (w bit for group or others). */
    public boolean writableByGroupOrOthers() {
        return (mode & 0022) != 0;
    }

    /** The same inode as {@code other} (device and inode number). */
    public boolean sameFile(FileStat other) {
        return other != null && dev == other.dev && ino == other.ino;
    }

    /** {@code a directory}, {@code a symbolic link}, {@code a socket}, ... for messages. */
    public String typeName() {
        return switch (type) {
            case S_IFSOCK -> "a socket";
            case S_IFLNK -> "a symbolic link";
            case S_IFREG -> "a regular file";
            case S_IFBLK -> "a block device";
            case S_IFDIR -> "a directory";
            case S_IFCHR -> "a character device";
            case S_IFIFO -> "a fifo";
            default -> "a file of type 0" + Integer.toOctalString(type);
        };
    }

    /** {@code drwxrwxrwt}, as {@code ls -l} writes it. */
    public String modeString() {
        char t = switch (type) {
            case S_IFSOCK -> 's';
            case S_IFLNK -> 'l';
            case S_IFBLK -> 'b';
            case S_IFDIR -> 'd';
            case S_IFCHR -> 'c';
            case S_IFIFO -> 'p';
            default -> '-';
        };
        StringBuilder b = new StringBuilder().append(t);
        String rwx = "rwx";
        for (int i = 8; i >= 0; i--) {
            b.append((mode & (1 << i)) != 0 ? rwx.charAt((8 - i) % 3) : '-');
        }
        if ((mode & 04000) != 0) {
            b.setCharAt(3, b.charAt(3) == 'x' ? 's' : 'S');
        }
        if ((mode & 02000) != 0) {
            b.setCharAt(6, b.charAt(6) == 'x' ? 's' : 'S');
        }
        if (sticky()) {
            b.setCharAt(9, b.charAt(9) == 'x' ? 't' : 'T');
        }
        return b.toString();
    }
}
