package io.engramhost.daemon.launch;

import io.engramhost.os.DirFd;
import io.engramhost.os.Fd;
import io.engramhost.os.FileStat;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.protocol.SocketPaths;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * Who owns a socket path: an exclusive flock on {@code <socket>.lock}, which holds the owner's pid.
 * The kernel drops the lock when the owner dies, so a dead daemon (or a zombie) never blocks a new
 * one, and a live one is never clobbered, unlike a check with {@code kill(pid, 0)} alone.
 *
 * <p>The lock file is opened through the checked socket directory's fd ({@link RuntimeDir}) with
 * {@code O_NOFOLLOW}, and used only when it is a regular file with one link that belongs to this
 * daemon's uid or root. A lock file of any other uid was put there by someone else: it is refused with
 * a message naming its owner, and its content (the pid it claims) is never repeated. The lock owns the
 * directory's fd and closes it last. A lock file that holds anything but a pid is not a daemon's, and is refused
 * and left as it is.
 *
 * <p>A daemon's lock file stays when it stops, so that two daemons never lock two files of one name. Only a start
 * refused before it served ({@link #close} before {@link #serving}) removes the lock file it created, while it still
 * holds the lock, and the directories it created: a refused start leaves nothing behind. Since a name may thus go
 * away, a lock taken is kept only while the name still names the file locked; otherwise the lock is taken again.
 */
public final class DaemonLock implements AutoCloseable {
    /** The most of a lock file that is read for its pid. */
    private static final int PID_BYTES = 32;

    /**
     * What a daemon's lock file holds: nothing, or a pid on its first line. A daemon killed inside {@link #claim},
     * between writing its pid over a longer one and cutting the file to it, leaves the old pid's last digits on a
     * second line.
     */
    private static final String PID_CONTENT = "(\\d{1,10}(\n\\d{0,10}\n?)?)?";

    /** How often a lock whose name went away while it was taken is taken again before giving up. */
    private static final int RETRIES = 10;

    private final Fd fd;
    private final Path path;
    private final RuntimeDir dir;
    /** This start created the lock file (it did not exist): a start refused before it serves removes it. */
    private final boolean created;
    private volatile boolean serving;

    private DaemonLock(Fd fd, Path path, RuntimeDir dir, boolean created) {
        this.fd = fd;
        this.path = path;
        this.dir = dir;
        this.created = created;
    }

    /**
     * Takes the lock of {@code socket} in {@code dir}, which it then owns (and closes, also when this
     * fails).
     *
     * @throws AlreadyRunningException naming the live owner's pid, when a daemon of this uid or root holds it
     * @throws IllegalStateException when the lock file is not one this daemon may use: a symlink, not a
     *     regular file, another uid's, or with more than one link
     */
    public static DaemonLock acquire(RuntimeDir dir, Path socket) {
        try {
            Path lockFile = SocketPaths.lockFile(socket);
            String name = lockFile.getFileName().toString();
            for (int attempt = 0;; attempt++) {
                boolean created = create(dir, name);
                Fd fd = open(dir, lockFile);
                boolean locked = false;
                try {
                    check(fd, lockFile);
                    if (!Posix.flock(fd, Posix.LOCK_EX | Posix.LOCK_NB)) {
                        throw new AlreadyRunningException(socket, readPid(fd));
                    }
                    locked = true;
                    FileStat named = dir.fd().statAt(name);
                    if (named == null || !named.sameFile(DirFd.stat(fd))) {
                        // a start refused meanwhile removed the file this fd locks: lock the one the name names now
                        locked = false; // what the name names is not this fd's file: never unlinked here
                        if (attempt == RETRIES) {
                            throw new IllegalStateException("the lock file " + lockFile + " was replaced " + RETRIES
                                    + " times while this daemon locked it: is another program removing it?");
                        }
                        fd.close();
                        continue;
                    }
                    if ((DirFd.stat(fd).mode() & 0077) != 0) {
                        DirFd.chmod(fd, 0600); // no one else may open it, and so hold it with a read-only fd
                    }
                    DaemonLock lock = new DaemonLock(fd, lockFile, dir, created);
                    lock.claim();
                    return lock;
                } catch (RuntimeException e) {
                    if (created && locked) {
                        dir.fd().unlink(name); // this start's own file, still locked: nothing left behind
                    }
                    fd.close();
                    throw e;
                }
            }
        } catch (RuntimeException e) {
            dir.discard();
            throw e;
        }
    }

    /** Creates the lock file {@code name} when it is missing (O_EXCL); true when this call created it. */
    private static boolean create(RuntimeDir dir, String name) {
        try {
            dir.fd().openFile(name, Posix.O_RDWR | Posix.O_CREAT | DirFd.O_EXCL, 0600).close();
            return true;
        } catch (NativeException e) {
            return false; // there already (EEXIST), or not creatable: open says why
        }
    }

    /**
     * Takes over the lock a predecessor daemon handed over with its fd ({@code lockFd}, which shares the
     * predecessor's open file and so its flock): it must be the lock file of {@code socket} in {@code dir}, pass
     * the checks of {@link #acquire}, and hold the lock. It does not write this process's pid: until the commit
     * point the predecessor may still be the daemon, so the file keeps naming it; the successor writes its own pid
     * once it has confirmed ({@link #claim}). Owns {@code lockFd} and {@code dir} from here on (closing both when this
     * fails).
     */
    public static DaemonLock adopt(Fd lockFd, RuntimeDir dir, Path socket) {
        try {
            Path lockFile = SocketPaths.lockFile(socket);
            check(lockFd, lockFile);
            FileStat named = dir.fd().statAt(lockFile.getFileName().toString());
            if (named == null || !named.sameFile(DirFd.stat(lockFd))) {
                throw new IllegalStateException("the lock handed over is not the file " + lockFile + " names");
            }
            if (!Posix.flock(lockFd, Posix.LOCK_EX | Posix.LOCK_NB)) {
                throw new IllegalStateException("the lock handed over for " + lockFile + " is not held by it");
            }
            return new DaemonLock(lockFd, lockFile, dir, false);
        } catch (RuntimeException e) {
            lockFd.close();
            dir.close();
            throw e;
        }
    }

    /**
     * Writes this process's pid into the lock file: it is the daemon now (a new one, a successor past its commit
     * point, or a predecessor serving again after a takeover that failed before it).
     */
    public void claim() {
        byte[] pid = (Posix.getpid() + "\n").getBytes(StandardCharsets.US_ASCII);
        if (Arrays.equals(DirFd.readUpTo(fd, PID_BYTES), pid)) {
            return; // it names this process already: a reader never sees it change
        }
        // the pid over the old one first, then the file cut to it: a reader never finds it empty, and one that reads
        // between the two calls finds this pid on the first line, followed by the tail of a longer old pid
        DirFd.writeFully(fd, pid, 0);
        Posix.ftruncate(fd, pid.length);
    }

    /** The lock file's fd, to hand over to a successor (which then shares the lock); this lock keeps owning it. */
    public Fd fd() {
        return fd;
    }

    private static Fd open(RuntimeDir dir, Path lockFile) {
        String name = lockFile.getFileName().toString();
        try {
            return dir.fd().openFile(name, Posix.O_RDWR | Posix.O_CREAT, 0600);
        } catch (NativeException e) {
            FileStat st = dir.fd().statAt(name);
            if (st != null && st.isSymlink()) {
                throw new IllegalStateException("refusing the lock file " + lockFile + ": it is a symbolic link (owned by "
                        + RuntimeDir.who(st.uid(), lockFile) + "), which is not followed; remove it, or use a private"
                        + " socket directory", e);
            }
            if (st != null && !RuntimeDir.trusted(st.uid())) {
                throw foreign(lockFile, st, null);
            }
            throw new IllegalStateException("cannot open the lock file " + lockFile + ": " + e.getMessage(), e);
        }
    }

    /** The file opened must be a regular file of this uid or root, with one link. */
    private static void check(Fd fd, Path lockFile) {
        FileStat st = DirFd.stat(fd);
        if (!RuntimeDir.trusted(st.uid())) {
            boolean held = !Posix.flock(fd, Posix.LOCK_SH | Posix.LOCK_NB);
            throw foreign(lockFile, st, held);
        }
        if (!st.isRegular()) {
            throw new IllegalStateException("refusing the lock file " + lockFile + ": it is " + st.typeName()
                    + ", not a regular file; remove it");
        }
        if (st.nlink() != 1) {
            throw new IllegalStateException("refusing the lock file " + lockFile + ": it has " + st.nlink() + " hard links,"
                    + " so another name points at the same file and writing it would change that file too; remove "
                    + lockFile);
        }
        String content = st.size() > PID_BYTES ? null
                : new String(DirFd.readUpTo(fd, PID_BYTES), StandardCharsets.US_ASCII);
        if (content == null || !content.matches(PID_CONTENT)) {
            throw new IllegalStateException("refusing the lock file " + lockFile + ": it holds " + st.size() + " bytes"
                    + " that are not a daemon's pid, so it is not an engram-host lock file and writing it would change"
                    + " it; remove it yourself if it is not needed, or give --socket another path");
        }
    }

    /** A lock file of another uid: its owner is named, its content is not trusted and not repeated. */
    private static IllegalStateException foreign(Path lockFile, FileStat st, Boolean held) {
        String owner = RuntimeDir.who(st.uid(), lockFile);
        String why = owner + " is neither this daemon's uid (" + DirFd.geteuid() + ") nor root, so the file's content"
                + " is not trusted; remove " + lockFile + " (as root or its owner), or use a private socket directory";
        if (Boolean.TRUE.equals(held)) {
            return new IllegalStateException("another process holds the lock " + lockFile + " (owner " + owner + "): "
                    + why);
        }
        return new IllegalStateException("refusing the lock file " + lockFile + ", which belongs to " + owner + " ("
                + st.typeName() + "): " + why);
    }

    /** The pid written in the lock file (through its fd, its first line), or -1 when it holds none. */
    private static int readPid(Fd fd) {
        String s = new String(DirFd.readUpTo(fd, PID_BYTES), StandardCharsets.US_ASCII);
        int line = s.indexOf('\n');
        s = (line < 0 ? s : s.substring(0, line)).trim();
        return s.matches("\\d{1,9}") ? Integer.parseInt(s) : -1;
    }

    public Path path() {
        return path;
    }

    /** The checked socket directory, which this lock owns. */
    public RuntimeDir dir() {
        return dir;
    }

    /** The daemon serves: from now on its lock file stays when it stops. */
    public void serving() {
        serving = true;
    }

    /**
     * Releases the lock. A start refused before it served ({@link #serving} not called) first removes the lock file
     * it created, while it still holds the lock, and then the directories it created, when empty.
     */
    @Override
    public void close() {
        boolean refused = created && !serving;
        try {
            if (refused) {
                String name = path.getFileName().toString();
                FileStat named = dir.fd().statAt(name);
                if (named != null && named.sameFile(DirFd.stat(fd))) {
                    dir.fd().unlink(name);
                }
            }
        } catch (RuntimeException e) {
            System.getLogger(DaemonLock.class.getName()).log(System.Logger.Level.WARNING, "cannot remove " + path
                    + ", which this refused start created: " + e.getMessage());
        } finally {
            try {
                fd.close();
            } finally {
                if (refused) {
                    dir.discard();
                } else {
                    dir.close();
                }
            }
        }
    }

    /** A live daemon owns the socket path. */
    public static final class AlreadyRunningException extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final int pid;

        AlreadyRunningException(Path socket, int pid) {
            super("engram-host is already running (pid=" + (pid < 0 ? "unknown" : pid) + ") on " + socket + ": stop it"
                    + " (engram-host stop --socket " + socket + "), take it over (serve --takeover, same flags), or serve"
                    + " another --instance or --socket");
            this.pid = pid;
        }

        public int pid() {
            return pid;
        }
    }
}
