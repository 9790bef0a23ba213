package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class WritableByOthersTest {
    @TempDir
    Path tmp;

    private static void mode(Path p, String perms) throws Exception {
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString(perms));
    }

    @Test
    void shouldNameTheFilesAndDirectoriesAnotherUserCouldChange() throws Exception {
        Path dir = Files.createDirectory(tmp.resolve("ckpt"));
        Path file = new SafetensorsWriter().add("t", DType.U8, new long[] {1}, new byte[1]).write(dir.resolve("m.safetensors"));
        int me = (Integer) Files.getAttribute(file, "unix:uid");
        Checkpoint cp = Checkpoint.open(file);
        mode(dir, "rwxr-xr-x");
        mode(file, "rw-r--r--");
        assertEquals(List.of(), WritableByOthers.of(cp, me), "0644 in 0755, owned by the daemon's uid");
        assertTrue(WritableByOthers.warning(cp, me).isEmpty(), "nothing to warn of");

        mode(file, "rw-rw-r--");
        List<String> group = WritableByOthers.of(cp, me);
        assertEquals(List.of("file " + file.toRealPath() + " (mode 0664, uid " + me + ") is writable by its group"), group);

        mode(file, "rw-r--r--");
        mode(dir, "rwxrwxrwx");
        List<String> others = WritableByOthers.of(cp, me);
        assertEquals(1, others.size(), others.toString());
        assertTrue(others.get(0).startsWith("directory " + dir.toRealPath() + " (mode 0777")
                && others.get(0).endsWith("is writable by its others, without the sticky bit"), others.get(0));

        // serve's warning: one line, whatever the count
        Path second = new SafetensorsWriter().add("u", DType.U8, new long[] {1}, new byte[1])
                .write(dir.resolve("n.safetensors"));
        mode(second, "rw-rw-rw-");
        Checkpoint two = Checkpoint.open(dir);
        assertEquals(2, WritableByOthers.of(two, me).size(), WritableByOthers.of(two, me).toString());
        String line = WritableByOthers.warning(two, me).orElseThrow();
        assertTrue(line.startsWith("checkpoint: " + WritableByOthers.of(two, me).get(0) + " (and 1 more of its files"
                + " and directories): another user can change what a later load reads"), line);
        assertEquals(1, line.lines().count(), line);
        Files.delete(second);

        Files.setAttribute(dir, "unix:mode", 01777); // /tmp's mode: others cannot rename what they do not own
        assertEquals(List.of(), WritableByOthers.of(cp, me));
        mode(dir, "rwxr-xr-x");

        // a daemon running as another uid: a file owned by this (non-root) uid is another user's
        List<String> owner = WritableByOthers.of(cp, me + 12345);
        if (me == 0) {
            assertEquals(List.of(), owner, "root's files are trusted");
        } else {
            assertEquals(2, owner.size(), owner.toString());
            assertTrue(owner.get(0).endsWith("is owned by uid " + me + ", neither this daemon's uid " + (me + 12345)
                    + " nor root"), owner.get(0));
        }
    }
}
