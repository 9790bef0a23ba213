package io.engramhost.daemon.launch;

import static java.lang.System.Logger.Level.INFO;
import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.os.DirFd;
import io.engramhost.os.FileStat;
import io.engramhost.os.NativeException;
import io.engramhost.protocol.ReadyFile;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * The socket's directory, checked once and then reached only through its fd (docs/protocol.md,
 * "Socket path"; docs/security.md). A missing one is created with mode 0700 (0711 when other uids
 * are admitted, so that they can reach the socket by its name, but list nothing). The directory must belong to this
 * daemon's effective uid or to root, and must not be writable by group or others unless the sticky bit is
 * set; a symlink in its place is not followed. For a directory the daemon did not create, every
 * parent up to {@code /} must also belong to root or this uid and not be writable by group or others
 * without the sticky bit. With admitted uids, every directory down to the socket must let them search it: the daemon
 * refuses to start where the mode bits shut them out whatever a group or an ACL says, and warns where only a group or
 * an ACL could let them through. Every file next to the socket is then created, removed and renamed through
 * {@link #fd()}, with {@code O_NOFOLLOW}: a symlink planted there is never followed. A directory the daemon did not
 * create is never chmod'ed.
 */
public final class RuntimeDir implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(RuntimeDir.class.getName());
    /** More parents than this is a loop, not a file system. */
    private static final int MAX_DEPTH = 4096;
    /** The mode of a socket directory the daemon creates when other uids are admitted: searchable, not listable. */
    static final int ADMITTING_MODE = 0711;

    private final DirFd dir;
    private final boolean created;
    /** The directories this start created, the socket's own last (empty: none), for {@link #discard}. */
    private final List<Path> made;

    private RuntimeDir(DirFd dir, boolean created, List<Path> made) {
        this.dir = dir;
        this.created = created;
        this.made = List.copyOf(made);
    }

    /**
     * Opens (creating when missing) and checks the socket directory {@code dir}; {@code admitted} are the other uids
     * admitted (--allow-uid; empty: none).
     *
     * @throws IllegalStateException naming the directory (or the parent), its owner and mode, and what to
     *     do, when it fails a check
     */
    public static RuntimeDir prepare(Path dir, Set<Integer> admitted) {
        if (!dir.isAbsolute()) {
            throw new IllegalArgumentException("socket directory " + dir + " must be an absolute path");
        }
        boolean othersAdmitted = !admitted.isEmpty();
        int mode = othersAdmitted ? ADMITTING_MODE : 0700;
        Path parent = dir.getParent();
        DirFd d;
        boolean created = false;
        List<Path> made = new ArrayList<>();
        if (parent == null) {
            d = DirFd.open(dir);
        } else {
            createParents(parent, othersAdmitted, made);
            String name = dir.getFileName().toString();
            try (DirFd p = DirFd.openFollowing(parent)) {
                created = p.mkdir(name, mode);
                d = openExisting(p, name, dir);
            }
            if (created) {
                made.add(dir);
            }
        }
        RuntimeDir r = new RuntimeDir(d, created, made);
        try {
            FileStat st = d.stat();
            if (!trusted(st.uid())) {
                throw new IllegalStateException("socket directory " + dir + " belongs to " + who(st.uid(), dir)
                        + ", not to this daemon's uid " + DirFd.geteuid() + " or root: its owner could replace the socket"
                        + " or plant files next to it; remove it (the daemon then creates it with mode 0"
                        + Integer.toOctalString(mode) + ") or choose a directory of your own with --socket");
            }
            if (created) {
                d.chmod(mode); // exactly this mode, whatever the umask took away
            } else if (st.writableByGroupOrOthers() && !st.sticky()) {
                throw new IllegalStateException("socket directory " + dir + " is writable by others (" + st.modeString()
                        + ", owner " + who(st.uid(), dir) + ") without the sticky bit: another user could replace the"
                        + " socket; use a private directory (chmod go-w " + dir + ", or let the daemon create one)");
            }
            if (!created) {
                checkParents(d, st, dir);
            }
            if (othersAdmitted) {
                checkAdmittedCanReach(d.realPath(), admitted);
            }
            return r;
        } catch (RuntimeException e) {
            r.discard();
            throw e;
        }
    }

    /**
     * With {@code --allow-uid}, the admitted uids must be able to search every directory down to the socket. The
     * daemon sets only the directories it creates (0711 for the socket's, o+x for a parent); an existing one (say,
     * left 0700 by a daemon started without {@code --allow-uid}) or a parent such as a 0700 {@code $XDG_RUNTIME_DIR}
     * keeps its mode. Where neither its group nor others may search a directory (and the uid does not own it with
     * u+x), no group and no ACL can let the uid through (an ACL's entries are bounded by its mask, which the group
     * bits show): refused, since the uid's {@code connect} could only fail with EACCES. Where only the group may
     * search it, a group or an ACL may still let the uid through, which the mode bits do not show: a warning.
     *
     * @throws IllegalStateException naming the directory, its mode and owner, the uid, and the fix
     */
    static void checkAdmittedCanReach(Path real, Set<Integer> admitted) {
        Set<Integer> others = new TreeSet<>(admitted);
        others.remove(0);
        others.remove(DirFd.geteuid());
        if (others.isEmpty()) {
            return;
        }
        Path p = real.getRoot();
        for (int i = 0; i <= real.getNameCount(); i++) {
            if (i > 0) {
                p = p.resolve(real.getName(i - 1));
            }
            int mode;
            int owner;
            try {
                mode = (Integer) Files.getAttribute(p, "unix:mode") & 07777;
                owner = (Integer) Files.getAttribute(p, "unix:uid");
            } catch (IOException | RuntimeException e) {
                return; // nothing to say
            }
            String shown = p + " (" + PosixFilePermissions.toString(permissions(mode)) + ", owner " + who(owner, p) + ")";
            for (int uid : others) {
                boolean owns = owner == uid;
                if (owns ? (mode & 0100) == 0 : (mode & 0011) == 0) {
                    throw new IllegalStateException("--allow-uid " + uid + ": " + shown + " is not searchable by uid "
                            + uid + ", so it could not reach the socket (EACCES): " + (owns ? "chmod u+x " + p
                            : "chmod o+x " + p + " (or g+x, with uid " + uid + " in its group)") + ", or choose a --socket"
                            + " in a directory it can search (one the daemon creates there gets mode 0711)");
                }
                if (!owns && (mode & 0001) == 0) {
                    LOG.log(WARNING, "--allow-uid: " + shown + " is not searchable by other users, so the admitted uid "
                            + uid + " cannot reach the socket unless its group or an ACL lets it: chmod o+x " + p
                            + ", or choose another --socket");
                    return;
                }
            }
        }
    }

    private static Set<PosixFilePermission> permissions(int mode) {
        Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
        PosixFilePermission[] bits = PosixFilePermission.values(); // OWNER_READ ... OTHERS_EXECUTE, high bit first
        for (int i = 0; i < bits.length; i++) {
            if ((mode & (0400 >> i)) != 0) {
                out.add(bits[i]);
            }
        }
        return out;
    }

    /**
     * Creates the missing parents of the socket's directory, each through its parent's fd, with the umask's mode;
     * when other uids are admitted, one this start creates gets search permission for group and others too, so that
     * they can reach the socket. Each one made is added to {@code made}.
     */
    private static void createParents(Path parent, boolean othersAdmitted, List<Path> made) {
        if (Files.isDirectory(parent)) {
            return;
        }
        Deque<Path> missing = new ArrayDeque<>();
        Path existing = parent;
        while (existing != null && !Files.isDirectory(existing)) {
            missing.push(existing);
            existing = existing.getParent();
        }
        if (existing == null) {
            throw new IllegalStateException("cannot create the socket directory's parent " + parent + ": no part of it"
                    + " exists");
        }
        DirFd at = null;
        try {
            at = DirFd.openFollowing(existing);
            for (Path p : missing) {
                String name = p.getFileName().toString();
                boolean createdHere = at.mkdir(name, 0777);
                DirFd next = DirFd.openFollowing(p);
                at.close();
                at = next;
                if (createdHere) {
                    made.add(p);
                    if (othersAdmitted) {
                        at.chmod(at.stat().mode() | 0011);
                    }
                }
            }
        } catch (RuntimeException e) {
            throw new IllegalStateException("cannot create the socket directory's parent " + parent + ": "
                    + e.getMessage(), e);
        } finally {
            if (at != null) {
                at.close();
            }
        }
    }

    private static DirFd openExisting(DirFd parent, String name, Path dir) {
        try {
            return parent.openDir(name);
        } catch (NativeException e) {
            FileStat st = e.errno() == DirFd.ELOOP || e.errno() == DirFd.ENOTDIR ? parent.statAt(name) : null;
            if (st != null && st.isSymlink()) {
                throw new IllegalStateException("socket directory " + dir + " is a symbolic link (to " + linkTarget(dir)
                        + ", owned by " + who(st.uid(), dir) + "), which is not followed: name the real directory in"
                        + " --socket, or remove the link", e);
            }
            if (st != null) {
                throw new IllegalStateException("socket directory " + dir + " exists but is not a directory (it is "
                        + st.typeName() + " owned by " + who(st.uid(), dir) + ")", e);
            }
            throw new IllegalStateException("cannot open socket directory " + dir + ": " + e.getMessage(), e);
        }
    }

    /**
     * Walks up from {@code d} through {@code ..} (the directory's real parents, whatever symlinks led to
     * it) to the root: each must belong to root or this uid, and be writable by group or others only
     * with the sticky bit. Otherwise someone else could rename the socket directory away and put their own
     * in its place.
     */
    private static void checkParents(DirFd d, FileStat st, Path dir) {
        Path real = d.realPath();
        DirFd cur = d;
        FileStat curSt = st;
        try {
            for (int depth = 0; depth < MAX_DEPTH; depth++) {
                DirFd up = cur.parent();
                if (cur != d) {
                    cur.close();
                }
                cur = up;
                FileStat upSt = up.stat();
                if (upSt.sameFile(curSt)) {
                    return; // the root is its own parent
                }
                real = real.getParent() == null ? real : real.getParent();
                if (!trusted(upSt.uid())) {
                    throw new IllegalStateException("socket directory " + dir + ": its parent " + real + " belongs to "
                            + who(upSt.uid(), real) + " (" + upSt.modeString() + "), neither this daemon's uid "
                            + DirFd.geteuid() + " nor root: that user could rename " + dir + " away and put a directory"
                            + " of their own in its place; choose a directory whose parents only root or uid "
                            + DirFd.geteuid() + " can change");
                }
                if (upSt.writableByGroupOrOthers() && !upSt.sticky()) {
                    throw new IllegalStateException("socket directory " + dir + ": its parent " + real + " is writable"
                            + " by others (" + upSt.modeString() + ") without the sticky bit: another user could rename "
                            + dir + " away and put a directory of their own in its place; choose a directory whose"
                            + " parents only root or uid " + DirFd.geteuid() + " can change");
                }
                curSt = upSt;
            }
            throw new IllegalStateException("socket directory " + dir + ": more than " + MAX_DEPTH + " parents");
        } finally {
            if (cur != d) {
                cur.close();
            }
        }
    }

    /** This daemon's effective uid or root: the owners whose files and directories it trusts. */
    static boolean trusted(int uid) {
        return uid == 0 || uid == DirFd.geteuid();
    }

    /** {@code uid 65534 (nobody)}: the name where {@code path} (not followed) still has that owner. */
    static String who(int uid, Path path) {
        try {
            String name = Files.getOwner(path, LinkOption.NOFOLLOW_LINKS).getName();
            if (!name.equals(Integer.toString(uid)) && uid == (int) Files.getAttribute(path, "unix:uid",
                    LinkOption.NOFOLLOW_LINKS)) {
                return "uid " + uid + " (" + name + ")";
            }
        } catch (IOException | RuntimeException e) {
            // the name is only a courtesy
        }
        return "uid " + uid;
    }

    private static String linkTarget(Path link) {
        try {
            return Files.readSymbolicLink(link).toString();
        } catch (IOException | RuntimeException e) {
            return "?";
        }
    }

    /**
     * Clears the socket path {@code name} before the daemon binds it, while holding the lock: a socket there (a
     * daemon's that is gone) is removed; anything else is refused and left as it is, since it is not the daemon's to
     * remove (a user's file given as --socket by mistake, or something planted in a shared directory).
     *
     * @throws IllegalStateException naming what is there and the fix
     */
    void clearSocket(String name) {
        FileStat st = dir.statAt(name);
        if (st == null) {
            return;
        }
        Path p = dir.resolve(name);
        if (!st.isSocket()) {
            throw new IllegalStateException(p + " is " + st.typeName() + " owned by " + who(st.uid(), p)
                    + ", not a socket: refusing to remove it; give --socket a path where nothing is, or remove it"
                    + " yourself if it is not needed");
        }
        unlinkStale(name, st, p);
    }

    /**
     * Clears the ready file {@code name} before the daemon writes its own, while holding the lock: one in the
     * daemon's own format ({@link ReadyFile#isReadyFile}), a regular file of this uid or root, is removed; anything
     * else is refused and left as it is.
     *
     * @throws IllegalStateException naming what is there and the fix
     */
    void clearReady(String name) {
        FileStat st = dir.statAt(name);
        if (st == null) {
            return;
        }
        Path p = dir.resolve(name);
        String notOurs = ReadyFile.notOurs(dir, name);
        if (notOurs != null) {
            throw new IllegalStateException(notOurs);
        }
        unlinkStale(name, st, p);
    }

    private void unlinkStale(String name, FileStat st, Path p) {
        try {
            dir.unlink(name);
        } catch (NativeException e) {
            throw new IllegalStateException("cannot remove " + p + " (" + st.typeName() + " owned by " + who(st.uid(), p)
                    + "): " + e.getMessage() + "; remove it, or use a private socket directory", e);
        }
        LOG.log(INFO, "removed " + p + ", " + st.typeName() + " left by a daemon that is gone"
                + (trusted(st.uid()) ? "" : " (owned by uid " + st.uid() + ")"));
    }

    /**
     * Gives the socket just bound at {@code name} its mode (0600, or 0666 when others are admitted), after
     * checking that the name in this directory is a socket of this uid; a symlink is not followed.
     */
    void protectSocket(String name, boolean othersAdmitted) {
        Path p = dir.resolve(name);
        FileStat st = dir.statAt(name);
        if (st == null || !st.isSocket() || st.uid() != DirFd.geteuid()) {
            throw new IllegalStateException("the socket just bound at " + p + " is not in the checked directory "
                    + dir.path() + " (found " + (st == null ? "nothing" : st.typeName() + " owned by uid " + st.uid())
                    + "): was the directory renamed or replaced while the daemon started?");
        }
        FileStat changed = dir.chmodNoFollow(name, othersAdmitted ? 0666 : 0600);
        if (!changed.sameFile(st)) {
            throw new IllegalStateException("the socket " + p + " was replaced while its mode was being set");
        }
    }

    /**
     * Removes the daemon's own file {@code name} as it stops: the socket ({@code socket} true; removed only while it
     * is a socket of this uid) or the ready file (only while it is in the daemon's own format). Anything else there
     * now is left alone; a failure is logged, not thrown.
     */
    public void removeOwn(String name, boolean socket) {
        try {
            FileStat st = dir.statAt(name);
            boolean own = st != null && (socket ? st.isSocket() && st.uid() == DirFd.geteuid()
                    : ReadyFile.notOurs(dir, name) == null);
            if (own) {
                dir.unlink(name);
            }
        } catch (RuntimeException e) {
            LOG.log(WARNING, "cannot remove " + dir.path().resolve(name) + ": " + e.getMessage());
        }
    }

    /** The directory's fd, through which every file next to the socket is reached. */
    public DirFd fd() {
        return dir;
    }

    public Path path() {
        return dir.path();
    }

    /** Whether this daemon created the directory (then its parents were not checked). */
    public boolean created() {
        return created;
    }

    @Override
    public void close() {
        dir.close();
    }

    /**
     * Closes, and removes what this start created, for a start that was refused before it served: the socket's
     * directory and the parents it made, each only while it is empty (a file someone put there since keeps it).
     */
    void discard() {
        dir.close();
        for (int i = made.size() - 1; i >= 0; i--) {
            Path p = made.get(i);
            try (DirFd parent = DirFd.openFollowing(p.getParent())) {
                if (!parent.rmdir(p.getFileName().toString())) {
                    return; // not empty: what is in it is not this start's, and nor are its parents
                }
            } catch (RuntimeException e) {
                LOG.log(WARNING, "cannot remove " + p + ", which this refused start created: " + e.getMessage());
                return;
            }
        }
    }
}
