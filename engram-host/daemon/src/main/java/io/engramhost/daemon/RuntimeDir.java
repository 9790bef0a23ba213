package io.engramhost.daemon;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

/**
 * The socket's directory. An absent one is created with mode 0700 (0711 when other uids are
 * admitted, so they can reach the socket but not list the directory). An existing one is used as
 * it is, unless others may write to it without the sticky bit: then anyone could replace the socket.
 */
public final class RuntimeDir {
    private RuntimeDir() {
    }

    public static void prepare(Path dir, boolean othersAdmitted) {
        try {
            if (!Files.exists(dir)) {
                Files.createDirectories(dir.getParent());
                Files.createDirectory(dir);
                Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString(othersAdmitted ? "rwx--x--x" : "rwx------"));
                return;
            }
            if (!Files.isDirectory(dir)) {
                throw new IllegalArgumentException("socket directory " + dir + " exists but is not a directory");
            }
            Set<PosixFilePermission> perms = Files.getPosixFilePermissions(dir);
            boolean othersWrite = perms.contains(PosixFilePermission.OTHERS_WRITE)
                    || perms.contains(PosixFilePermission.GROUP_WRITE);
            if (othersWrite && !sticky(dir)) {
                throw new IllegalArgumentException("socket directory " + dir + " is writable by others ("
                        + PosixFilePermissions.toString(perms) + ") without the sticky bit: another user could replace"
                        + " the socket; use a private directory");
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot prepare socket directory " + dir + ": " + e, e);
        }
    }

    private static boolean sticky(Path dir) throws IOException {
        Object mode = Files.getAttribute(dir, "unix:mode");
        return mode instanceof Integer m && (m & 01000) != 0;
    }
}
