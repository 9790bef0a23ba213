package io.engramhost.client;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFileAttributes;

/**
 * What to do when {@code connect} to the socket fails with EACCES or EPERM, in one line, the same as the Python and C
 * clients say it (docs/security.md, "Other uids"): the first directory down to the socket that this uid may not
 * search (its mode, owner and group), else the socket's own mode; and the fix, the daemon's {@code --allow-uid}
 * naming this uid and a directory that lets it search.
 */
final class AccessHint {
    private AccessHint() {
    }

    /** The hint for {@code socket}, for the effective uid {@code uid} of this process. */
    static String of(Path socket, int uid) {
        Path abs = socket.toAbsolutePath();
        Path dir = abs.getParent();
        String admit = "the daemon must admit uid " + uid + " (serve --allow-uid " + uid + ")";
        Path p = dir.getRoot();
        for (int i = 0; i <= dir.getNameCount(); i++) {
            if (i > 0) {
                p = p.resolve(dir.getName(i - 1));
            }
            if (!Files.isExecutable(p)) {
                return "uid " + uid + " may not search " + describe(p) + ": " + admit + ", and " + p + " must let it"
                        + " search (chmod o+x " + p + ", or g+x with uid " + uid + " in its group; a socket directory"
                        + " the daemon creates with --allow-uid is mode 0711)";
            }
        }
        if (!Files.isWritable(abs)) {
            String a = attributes(abs);
            return "the socket" + (a == null ? "" : " (" + a + ")") + " lets only its owner connect: " + admit
                    + "; the socket is then mode 0666 and each peer's uid is checked";
        }
        return "neither the socket's mode nor its directory " + describe(dir) + " shuts uid " + uid + " out (an ACL"
                + " or a security module may): " + admit + ", and the socket and its directory must let it in";
    }

    /** {@code /run/engram-host (mode 0700, owner uid 0 (root), group 0 (root))}; the path alone when unreadable. */
    static String describe(Path p) {
        String a = attributes(p);
        return a == null ? p.toString() : p + " (" + a + ")";
    }

    /** {@code mode 0700, owner uid 0 (root), group 0 (root)}, not following a link; null when unreadable. */
    private static String attributes(Path p) {
        try {
            PosixFileAttributes a = Files.readAttributes(p, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
            int mode = (Integer) Files.getAttribute(p, "unix:mode", LinkOption.NOFOLLOW_LINKS) & 07777;
            int uid = (Integer) Files.getAttribute(p, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            int gid = (Integer) Files.getAttribute(p, "unix:gid", LinkOption.NOFOLLOW_LINKS);
            return String.format("mode %04o", mode) + ", owner uid " + uid + named(a.owner().getName(), uid) + ", group "
                    + gid + named(a.group().getName(), gid);
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    private static String named(String name, int id) {
        return name.equals(Integer.toString(id)) ? "" : " (" + name + ")";
    }
}
