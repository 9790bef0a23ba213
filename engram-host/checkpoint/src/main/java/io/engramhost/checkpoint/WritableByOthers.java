package io.engramhost.checkpoint;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * Who besides the daemon could change a checkpoint's files: a file or its directory owned by another user than
 * the daemon's or root, a file that its group or others may write, or a directory that they may write without the
 * sticky bit (they could rename a file away and put another in its place). The daemon serves what it read and
 * checks that the files did not change during the load, so such a user cannot make it serve wrong data unseen; but
 * the next load, or a restart, would read what that user wrote. {@code serve} warns; it does not refuse, since
 * a group or an ACL may be intended.
 */
public final class WritableByOthers {
    private WritableByOthers() {
    }

    /** One line per file or directory of {@code checkpoint} that a user other than {@code uid} or root may change. */
    public static List<String> of(Checkpoint checkpoint, int uid) {
        Set<Path> files = new LinkedHashSet<>();
        Set<Path> dirs = new LinkedHashSet<>();
        for (SafetensorsFile f : checkpoint.files()) {
            Path real;
            try {
                real = f.path().toRealPath();
            } catch (IOException e) {
                continue; // gone since the open: the unchanged-checkpoint check says so
            }
            files.add(real);
            if (real.getParent() != null) {
                dirs.add(real.getParent());
            }
        }
        List<String> out = new ArrayList<>();
        for (Path p : files) {
            describe(p, uid, false).ifPresent(out::add);
        }
        for (Path p : dirs) {
            describe(p, uid, true).ifPresent(out::add);
        }
        return out;
    }

    /**
     * {@link #of} as the one line {@code serve} warns with, or empty when there is nothing to say: the first file or
     * directory, and how many more there are (a checkpoint of many shards another user owns is one line, not one a
     * shard), then what it means.
     */
    public static Optional<String> warning(Checkpoint checkpoint, int uid) {
        List<String> all = of(checkpoint, uid);
        if (all.isEmpty()) {
            return Optional.empty();
        }
        return Optional.of("checkpoint: " + all.get(0) + (all.size() > 1 ? " (and " + (all.size() - 1) + " more of its"
                + " files and directories)" : "") + ": another user can change what a later load reads (this load"
                + " checks that the files did not change under it, and verify compares them afterwards;"
                + " docs/security.md)");
    }

    private static Optional<String> describe(Path p, int uid, boolean directory) {
        int owner;
        int mode;
        try {
            owner = (Integer) Files.getAttribute(p, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            mode = (Integer) Files.getAttribute(p, "unix:mode", LinkOption.NOFOLLOW_LINKS) & 07777;
        } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
            return Optional.empty(); // no POSIX attributes here: nothing to say
        }
        String what = (directory ? "directory " : "file ") + p + " (mode " + String.format("%04o", mode) + ", uid "
                + owner + ")";
        if (owner != uid && owner != 0) {
            return Optional.of(what + " is owned by uid " + owner + ", neither this daemon's uid " + uid
                    + " nor root");
        }
        boolean sticky = (mode & 01000) != 0;
        if ((mode & 0022) != 0 && !(directory && sticky)) {
            return Optional.of(what + " is writable by its " + ((mode & 0002) != 0 ? "others" : "group")
                    + (directory ? ", without the sticky bit" : ""));
        }
        return Optional.empty();
    }
}
