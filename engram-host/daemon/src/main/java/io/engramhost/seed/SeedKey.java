package io.engramhost.seed;

import io.engramhost.os.Posix;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.util.Arrays;
import java.util.Set;

/**
 * The shared secret of {@code --seed-key FILE}: every byte of the file, which both sides prove they hold
 * ({@link SeedAuth}) and never send. The file must be a regular file of 32 to 4096 bytes, of this process's uid or
 * root, readable and writable by its owner only (mode 0600 or 0400); anything else is refused in one line naming the
 * file and what is wrong.
 */
public final class SeedKey {
    /** The fewest bytes a key may have. */
    public static final int MIN_BYTES = 32;
    /** The most bytes a key may have. */
    public static final int MAX_BYTES = 4096;
    private final byte[] key;

    private SeedKey(byte[] key) {
        this.key = key;
    }

    /** A key of {@code bytes} (a copy), for tests and for {@link #read}. */
    public static SeedKey of(byte[] bytes) {
        if (bytes.length < MIN_BYTES || bytes.length > MAX_BYTES) {
            throw new IllegalArgumentException("a seed key has " + MIN_BYTES + " to " + MAX_BYTES + " bytes, not "
                    + bytes.length);
        }
        return new SeedKey(bytes.clone());
    }

    /** Reads and checks the key file {@code file} ({@code --seed-key}). */
    public static SeedKey read(Path file) {
        byte[] bytes = readPrivate(file, "--seed-key", MIN_BYTES, MAX_BYTES, "a key needs " + MIN_BYTES + " to "
                + MAX_BYTES + " (head -c 32 /dev/urandom > " + file + ")");
        SeedKey k = new SeedKey(bytes.clone());
        Arrays.fill(bytes, (byte) 0); // the read's own copy
        return k;
    }

    /**
     * The bytes of a secret file given with {@code flag}: a regular file (not a link) of this process's uid or root,
     * with no permission for group or others, of {@code min} to {@code max} bytes ({@code sizeRule} says what is
     * needed, and how to make one); anything else is refused in one line naming the flag, the file and the fix.
     */
    static byte[] readPrivate(Path file, String flag, long min, long max, String sizeRule) {
        String what = flag + " " + file + ": ";
        PosixFileAttributes a;
        try {
            a = Files.readAttributes(file, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        } catch (NoSuchFileException e) {
            throw new IllegalArgumentException(what + "no such file: give " + flag + " the path of one (" + sizeRule
                    + ")", e);
        } catch (IOException e) {
            throw new IllegalArgumentException(what + "cannot read it (" + e.getMessage() + ")", e);
        }
        if (!a.isRegularFile()) {
            throw new IllegalArgumentException(what + "not a regular file" + (a.isSymbolicLink()
                    ? " (a symbolic link, which is not followed)" : ""));
        }
        Set<PosixFilePermission> p = a.permissions();
        for (PosixFilePermission bad : Set.of(PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE,
                PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
                PosixFilePermission.OTHERS_EXECUTE)) {
            if (p.contains(bad)) {
                throw new IllegalArgumentException(what + "mode " + mode(p) + " lets others than its owner at it:"
                        + " chmod 600 " + file);
            }
        }
        int uid;
        try {
            uid = (Integer) Files.getAttribute(file, "unix:uid", LinkOption.NOFOLLOW_LINKS);
        } catch (IOException | UnsupportedOperationException e) {
            throw new IllegalArgumentException(what + "cannot read its owner (" + e.getMessage() + ")", e);
        }
        int euid = Posix.geteuid();
        if (uid != euid && uid != 0) {
            throw new IllegalArgumentException(what + "belongs to uid " + uid + ", not to this daemon's uid " + euid
                    + " or root");
        }
        if (a.size() < min || a.size() > max) {
            throw new IllegalArgumentException(what + "holds " + a.size() + " bytes; " + sizeRule);
        }
        byte[] bytes;
        try {
            bytes = Files.readAllBytes(file);
        } catch (IOException e) {
            throw new IllegalArgumentException(what + "cannot read it (" + e.getMessage() + ")", e);
        }
        if (bytes.length < min || bytes.length > max) {
            throw new IllegalArgumentException(what + "changed while read: " + bytes.length + " bytes");
        }
        return bytes;
    }

    private static String mode(Set<PosixFilePermission> p) {
        int m = 0;
        for (PosixFilePermission x : p) {
            m |= 1 << (8 - x.ordinal());
        }
        return String.format("0%03o", m);
    }

    /** The key's bytes (the caller must not keep or send them). */
    byte[] bytes() {
        return key;
    }
}
