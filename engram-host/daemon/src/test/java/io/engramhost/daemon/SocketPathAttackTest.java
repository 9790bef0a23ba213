package io.engramhost.daemon;

import static io.engramhost.daemon.Attacker.q;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.daemon.launch.DaemonLock;
import io.engramhost.memfd.MemfdRegion;
import io.engramhost.memfd.PageKind;
import io.engramhost.os.Fd;
import io.engramhost.os.ProcessProbe;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.RegionKind;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.store.Catalog;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The daemon (this process, root) against a local user (uid 65534, separate processes through
 * setpriv) who squats its socket path: a directory of their own, symlinks planted next to the socket
 * (in a sticky directory, where they may create files, and in a plain world-writable one, which is
 * refused outright), and a lock file they hold. Real sockets, real files; every refusal must name what
 * was wrong, and no file outside the socket directory may change. docs/security.md lists the checks.
 */
@Timeout(60)
class SocketPathAttackTest {
    private static final String PRECIOUS = "precious\n";

    @TempDir
    Path base;
    private Path sticky;
    private Path victim;
    private FileTime victimTime;
    private int ownedFds;
    private int openFds = -2;

    /** A daemon on {@code socket} admitting {@code allowUids}, loading until {@code held} opens. */
    private static Daemon start(Path socket, Set<Integer> allowUids, TestDaemons.Held held) {
        return TestDaemons.start(TestDaemons.context(socket, held, allowUids));
    }

    /** A daemon on {@code socket} that stays loading. */
    private static Daemon loading(Path socket, Set<Integer> allowUids) {
        return start(socket, allowUids, new TestDaemons.Held(SocketPathAttackTest::catalog));
    }

    /** One sealed memfd with one table. */
    private static Catalog catalog() {
        MemfdRegion region = MemfdRegion.create("engram.attack", 4096, PageKind.SMALL, null);
        region.seal();
        Manifest manifest = new Manifest(sha256OfNothing(), new byte[0],
                List.of(new Manifest.Region(RegionKind.MEMFD, 4096, 0, -1)),
                List.of(new Manifest.Table("t.weight", "I64", new long[] {16}, 128, 0, 0, 7, RegionKind.MEMFD, 0, -1)));
        return new Catalog(manifest, List.of(region.fd()), "00".repeat(32), e -> List.of(), "memfd", region);
    }

    @BeforeEach
    void setUp() throws Exception {
        Attacker.assumeAvailable();
        Files.setPosixFilePermissions(base, PosixFilePermissions.fromString("rwxr-xr-x"));
        victim = base.resolve("victim");
        Files.writeString(victim, PRECIOUS);
        Files.setPosixFilePermissions(victim, PosixFilePermissions.fromString("rw-r--r--"));
        victimTime = Files.getLastModifiedTime(victim);
        sticky = Files.createDirectory(base.resolve("sticky"));
        Files.setAttribute(sticky, "unix:mode", 01777); // like /tmp
        Attacker.run("test -w " + q(sticky) + " && test -r " + q(victim));
        ownedFds = Fd.openCount();
        openFds = openFds();
    }

    @AfterEach
    void noFdLeft() throws InterruptedException {
        if (openFds == -2) {
            return; // skipped before it began
        }
        assertEquals(ownedFds, Fd.openCount(), "owned fds");
        // The JVM reads its cgroup's files now and then: those fds come and go on their own.
        for (int i = 0; i < 100 && openFds() != openFds; i++) {
            Thread.sleep(20);
        }
        assertEquals(openFds, openFds(), "open fds: " + ProcessProbe.openFds());
    }

    private static int openFds() {
        return (int) ProcessProbe.openFds().stream().filter(f -> !f.contains(" -> /sys/")).count();
    }

    /** The attacker's target: neither its content, nor its mode, nor its time changed. */
    private void assertVictimUntouched() throws Exception {
        assertEquals(PRECIOUS, Files.readString(victim), "the symlink's target was written");
        assertEquals("rw-r--r--", PosixFilePermissions.toString(Files.getPosixFilePermissions(victim)),
                "the symlink's target had its mode changed");
        assertEquals(victimTime, Files.getLastModifiedTime(victim));
        assertEquals(1, ((Number) Files.getAttribute(victim, "unix:nlink")).intValue());
    }

    private static Set<String> names(Path dir) throws Exception {
        try (Stream<Path> s = Files.list(dir)) {
            return new TreeSet<>(s.map(p -> p.getFileName().toString()).toList());
        }
    }

    private static IllegalStateException refused(Path socket) {
        return refused(socket, Set.of());
    }

    private static IllegalStateException refused(Path socket, Set<Integer> allowUids) {
        return assertThrows(IllegalStateException.class, () -> loading(socket, allowUids).close());
    }

    private static void assertContains(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), "'" + p + "' missing from: " + message);
        }
    }

    private static String mode(Path p) throws Exception {
        return PosixFilePermissions.toString(Files.getPosixFilePermissions(p, LinkOption.NOFOLLOW_LINKS));
    }

    // --- the socket's directory ---

    @Test
    void shouldRefuseASocketDirectoryOfAnotherUser() throws Exception {
        Path evil = sticky.resolve("evil");
        Path hidden = sticky.resolve("hidden");
        Path open = sticky.resolve("open");
        Attacker.run("mkdir -m 0755 " + q(evil) + " && mkdir -m 0700 " + q(hidden) + " && mkdir -m 1777 " + q(open));
        for (Path dir : List.of(evil, hidden, open)) {
            String m = refused(dir.resolve("d.sock")).getMessage();
            assertContains(m, "socket directory " + dir + " belongs to uid 65534 (nobody)", "not to this daemon's uid 0 or"
                    + " root", "remove it");
            assertEquals(Set.of(), names(dir), "nothing was created in " + dir);
        }
        String m = refused(evil.resolve("d.sock"), Set.of(Attacker.UID)).getMessage();
        assertContains(m, "belongs to uid 65534 (nobody)");
    }

    @Test
    void shouldNotFollowASymlinkAtTheSocketDirectory() throws Exception {
        Path rootDir = Files.createDirectory(base.resolve("root-only"));
        Path link = sticky.resolve("run");
        Attacker.run("ln -s " + q(rootDir) + " " + q(link));
        String m = refused(link.resolve("d.sock")).getMessage();
        assertContains(m, "socket directory " + link + " is a symbolic link (to " + rootDir + ", owned by uid 65534 (nobody))",
                "not followed");
        assertEquals(Set.of(), names(rootDir), "nothing was created where the link points");

        Path file = sticky.resolve("file");
        Attacker.run("touch " + q(file));
        assertContains(refused(file.resolve("d.sock")).getMessage(), "socket directory " + file
                + " exists but is not a directory (it is a regular file owned by uid 65534 (nobody))");
    }

    @Test
    void shouldRefuseADirectoryWhoseParentAnotherUserControls() throws Exception {
        Path evil = sticky.resolve("evil");
        Attacker.run("mkdir -m 0755 " + q(evil));
        Path sub = Files.createDirectory(evil.resolve("sub")); // root's, inside the attacker's directory
        String m = refused(sub.resolve("d.sock")).getMessage();
        assertContains(m, "socket directory " + sub + ": its parent " + evil.toRealPath() + " belongs to uid 65534 (nobody)");
        assertEquals(Set.of(), names(sub));

        Path plain = Files.createDirectory(base.resolve("plain"));
        Files.setAttribute(plain, "unix:mode", 0777);
        Path inPlain = Files.createDirectory(plain.resolve("sub"));
        m = refused(inPlain.resolve("d.sock")).getMessage();
        assertContains(m, "socket directory " + inPlain + ": its parent " + plain.toRealPath()
                + " is writable by others (drwxrwxrwx) without the sticky bit");
        assertEquals(Set.of(), names(inPlain));
    }

    @Test
    void shouldRefuseADirectoryWritableByOthersWithoutTheStickyBit() throws Exception {
        Path plain = Files.createDirectory(base.resolve("plain"));
        Files.setAttribute(plain, "unix:mode", 0777);
        Path socket = plain.resolve("d.sock");
        for (String name : List.of("d.sock.lock", "d.sock.ready.tmp", "d.sock.ready", "d.sock")) {
            Attacker.run("ln -s " + q(victim) + " " + q(plain.resolve(name)));
        }
        Set<String> planted = names(plain);
        assertContains(refused(socket).getMessage(), "socket directory " + plain + " is writable by others (drwxrwxrwx",
                "without the sticky bit");
        assertContains(refused(socket, Set.of(Attacker.UID)).getMessage(), "is writable by others");
        assertEquals(planted, names(plain), "nothing created or removed");
        assertVictimUntouched();

        Path group = Files.createDirectory(base.resolve("group"));
        Files.setAttribute(group, "unix:mode", 0770);
        assertContains(refused(group.resolve("d.sock")).getMessage(), "is writable by others (drwxrwx---");
    }

    @Test
    void shouldCreateAMissingDirectoryWithTheDocumentedMode() throws Exception {
        for (boolean others : new boolean[] {false, true}) {
            Path socket = base.resolve(others ? "shared/run/d.sock" : "private/run/d.sock");
            try (Daemon d = loading(socket, others ? Set.of(Attacker.UID) : Set.of())) {
                assertEquals(others ? "rwx--x--x" : "rwx------", mode(socket.getParent()),
                        "0711 with admitted uids: they reach the socket by its name, and list nothing");
                if (others) {
                    assertTrue(mode(socket.getParent().getParent()).matches("rwx.-x.-x"),
                            "a parent this start created lets them search it too: " + mode(socket.getParent().getParent()));
                }
                assertEquals(others ? "rw-rw-rw-" : "rw-------", mode(socket));
                assertEquals("rw-------", mode(SocketPaths.lockFile(socket)));
                assertEquals(Integer.toString(d.pid()), Files.readString(SocketPaths.lockFile(socket)).trim());
            }
        }
    }

    // --- files next to the socket, in a sticky directory the attacker may write ---

    @Test
    void shouldRefuseASymlinkAtTheLockFile() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Attacker.run("ln -s " + q(victim) + " " + q(SocketPaths.lockFile(socket)));
        String m = refused(socket).getMessage();
        assertContains(m, "refusing the lock file " + SocketPaths.lockFile(socket) + ": it is a symbolic link (owned by"
                + " uid 65534 (nobody)), which is not followed");
        assertFalse(Files.exists(socket, LinkOption.NOFOLLOW_LINKS), "no socket bound");
        assertVictimUntouched();
    }

    @Test
    void shouldRefuseALockFileWithASecondLink() throws Exception {
        Path socket = sticky.resolve("d.sock");
        // An attacker where fs.protected_hardlinks is 0 may link a file of root's: made here by root.
        Files.createLink(SocketPaths.lockFile(socket), victim);
        String m = refused(socket).getMessage();
        assertContains(m, "refusing the lock file " + SocketPaths.lockFile(socket) + ": it has 2 hard links");
        Files.delete(SocketPaths.lockFile(socket));
        assertVictimUntouched();
    }

    @Test
    void shouldRefuseAFifoAtTheLockFile() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Attacker.run("mkfifo " + q(SocketPaths.lockFile(socket)));
        assertContains(refused(socket).getMessage(), "refusing the lock file " + SocketPaths.lockFile(socket)
                + ", which belongs to uid 65534 (nobody) (a fifo)");
    }

    /**
     * Nothing planted at the socket path or the ready file's is removed, followed or replaced: the daemon refuses to
     * start, in one line naming it, and leaves it as it was (only a socket, or a ready file in the daemon's own
     * format, is the daemon's to clear).
     */
    @Test
    void shouldRefuseSymlinksAtTheSocketAndReadyFilesAndLeaveThemAlone() throws Exception {
        for (boolean others : new boolean[] {false, true}) {
            Path socket = sticky.resolve(others ? "o.sock" : "p.sock");
            Path ready = SocketPaths.readyFile(socket);
            Attacker.run("ln -s " + q(victim) + " " + q(socket));
            assertContains(refused(socket, others ? Set.of(Attacker.UID) : Set.of()).getMessage(), socket
                    + " is a symbolic link owned by uid 65534 (nobody), not a socket: refusing to remove it");
            assertTrue(Files.isSymbolicLink(socket), "the planted link is left as it was");
            Attacker.run("rm -f " + q(socket) + " && ln -s " + q(victim) + " " + q(ready));
            assertContains(refused(socket, others ? Set.of(Attacker.UID) : Set.of()).getMessage(), ready
                    + " is a symbolic link, not an engram-host ready file: refusing to replace it");
            assertTrue(Files.isSymbolicLink(ready), "the planted link is left as it was");
            assertFalse(Files.exists(socket, LinkOption.NOFOLLOW_LINKS), "no socket bound");
            Attacker.run("rm -f " + q(ready));
            assertVictimUntouched();
        }
    }

    /** A link planted at the ready file while the daemon loads is not replaced: the daemon fails, serving nothing. */
    @Test
    void shouldNotReplaceALinkPlantedWhileLoading() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path ready = SocketPaths.readyFile(socket);
        TestDaemons.Held held = new TestDaemons.Held(SocketPathAttackTest::catalog);
        try (Daemon d = start(socket, Set.of(), held)) {
            Attacker.run("ln -s " + q(victim) + " " + q(ready));
            held.open();
            IllegalStateException e = assertThrows(IllegalStateException.class, d::awaitReady);
            assertContains(e.getMessage(), ready + " is a symbolic link, not an engram-host ready file");
            assertEquals(io.engramhost.protocol.DaemonState.FAILED, d.state());
            assertTrue(Files.isSymbolicLink(ready), "the planted link is left as it was");
            try (var files = Files.list(sticky)) {
                assertEquals(List.of(), files.filter(f -> f.getFileName().toString().contains(".tmp")).toList(),
                        "the daemon's temporary file is gone");
            }
        }
        assertTrue(Files.isSymbolicLink(ready), "and stays after the daemon stops");
        assertVictimUntouched();
    }

    @Test
    void shouldMakeItsLockFilePrivate() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path lock = Files.writeString(SocketPaths.lockFile(socket), "123\n");
        Files.setPosixFilePermissions(lock, PosixFilePermissions.fromString("rw-r--r--"));
        try (Daemon d = loading(socket, Set.of())) {
            assertEquals("rw-------", mode(lock), "no one else can open it to hold it");
            String out = Attacker.run("flock -n -s " + q(lock) + " true 2>&1; echo rc=$?");
            assertTrue(out.contains("Permission denied") && !out.contains("rc=0"), out);
        }
    }

    /** Another user's file at the socket path, or a directory at the ready file's, is refused and left as it is. */
    @Test
    void shouldRefuseAnotherUsersFileAtTheSocketPathAndADirectoryAtTheReadyFile() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Attacker.run("echo squat > " + q(socket));
        assertContains(refused(socket).getMessage(), socket + " is a regular file owned by uid 65534 (nobody), not a"
                + " socket: refusing to remove it");
        assertEquals("squat\n", Files.readString(socket), "left as it was");
        Attacker.run("rm -f " + q(socket));
        Path ready = SocketPaths.readyFile(socket);
        Attacker.run("mkdir " + q(ready));
        assertContains(refused(socket).getMessage(), ready + " is a directory, not an engram-host ready file");
        Files.delete(ready);
        loading(socket, Set.of()).close(); // the refusal released the lock
    }

    /** A ready file of this uid in another format (a user's notes.txt.ready, say) is not the daemon's to replace. */
    @Test
    void shouldRefuseAReadyFileNotInTheDaemonsFormat() throws Exception {
        Path socket = sticky.resolve("notes.txt");
        Path ready = SocketPaths.readyFile(socket);
        Files.writeString(ready, "my notes\n");
        assertContains(refused(socket).getMessage(), ready + " is not an engram-host ready file (it holds 9 bytes of"
                + " other content): refusing to replace it");
        assertEquals("my notes\n", Files.readString(ready));
        Files.writeString(ready, "pid=999999\nfingerprint=" + "ab".repeat(32) + "\nbackend=memfd\nsocket=" + socket
                + "\n");
        loading(socket, Set.of()).close(); // a dead daemon's ready file is removed
        assertFalse(Files.exists(ready));
    }

    /** A lock file that holds anything but a pid is not a daemon's: refused, not truncated. */
    @Test
    void shouldRefuseALockFileThatIsNotADaemons() throws Exception {
        Path socket = sticky.resolve("notes.txt");
        Path lock = SocketPaths.lockFile(socket);
        Files.writeString(lock, "dear diary\n");
        assertContains(refused(socket).getMessage(), "refusing the lock file " + lock + ": it holds 11 bytes that are"
                + " not a daemon's pid");
        assertEquals("dear diary\n", Files.readString(lock));
    }

    // --- the lock ---

    @Test
    void shouldRefuseALockHeldByAnotherUserWithoutRepeatingItsContent() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path lock = SocketPaths.lockFile(socket);
        try (Attacker a = Attacker.holding("exec 9>" + q(lock) + "; echo 1 >&9; flock -n 9 || exit 3; echo ready;"
                + " exec sleep 60")) {
            IllegalStateException e = refused(socket);
            assertContains(e.getMessage(), "another process holds the lock " + lock + " (owner uid 65534 (nobody))",
                    "not trusted");
            assertFalse(e.getMessage().contains("pid=1"), e.getMessage());
            assertFalse(e.getMessage().contains("already running"), e.getMessage());
            assertFalse(Files.exists(socket, LinkOption.NOFOLLOW_LINKS));
        }
        String m = refused(socket).getMessage();
        assertContains(m, "refusing the lock file " + lock + ", which belongs to uid 65534 (nobody) (a regular file)");
        assertFalse(m.contains("pid="), m);
        assertEquals("1\n", Files.readString(lock), "the attacker's file was not written either");
    }

    @Test
    void shouldNameThePidOfADaemonOfItsOwnUid() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path lock = SocketPaths.lockFile(socket);
        // Another root process holds the lock: the legitimate case, whose pid is trusted and named.
        Process holder = new ProcessBuilder("sh", "-c", "exec 9>" + q(lock) + "; echo 4242 >&9; flock -n 9 || exit 3;"
                + " echo ready; exec sleep 60").redirectErrorStream(true).start();
        try {
            assertEquals('r', holder.getInputStream().read());
            DaemonLock.AlreadyRunningException e = assertThrows(DaemonLock.AlreadyRunningException.class,
                    () -> loading(socket, Set.of()).close());
            assertEquals("engram-host is already running (pid=4242) on " + socket + ": stop it (engram-host stop --socket "
                    + socket + "), take it over (serve --takeover, same flags), or serve another --instance or --socket",
                    e.getMessage());
        } finally {
            holder.destroyForcibly();
            holder.waitFor();
        }
        Files.writeString(lock, "4242\n"); // left by a daemon that is gone
        try (Daemon d = loading(socket, Set.of())) {
            assertEquals(d.pid() + "\n", Files.readString(lock), "the daemon's own lock file is rewritten");
        }
    }

    /**
     * A daemon killed inside its claim, between writing its pid over a longer one and cutting the file to it, leaves
     * the old pid's tail on a second line: that is still a daemon's lock file, taken and cut to the new pid; the
     * first line is the pid named to a start refused meanwhile.
     */
    @Test
    void shouldTakeALockFileLeftHalfWayThroughAClaim() throws Exception {
        Path socket = sticky.resolve("d.sock");
        Path lock = SocketPaths.lockFile(socket);
        Process holder = new ProcessBuilder("sh", "-c", "exec 9>" + q(lock) + "; printf '4242\\n456\\n' >&9;"
                + " flock -n 9 || exit 3; echo ready; exec sleep 60").redirectErrorStream(true).start();
        try {
            assertEquals('r', holder.getInputStream().read());
            DaemonLock.AlreadyRunningException e = assertThrows(DaemonLock.AlreadyRunningException.class,
                    () -> loading(socket, Set.of()).close());
            assertContains(e.getMessage(), "(pid=4242)");
        } finally {
            holder.destroyForcibly();
            holder.waitFor();
        }
        Files.writeString(lock, "99\n4567890\n"); // a 2-digit pid written over 9 digits, then killed
        try (Daemon d = loading(socket, Set.of())) {
            assertEquals(d.pid() + "\n", Files.readString(lock), "cut to the daemon's own pid");
        }
        Files.writeString(lock, "1234567890\n");
        try (Daemon d = loading(socket, Set.of())) {
            assertEquals(d.pid() + "\n", Files.readString(lock), "a longer stale pid leaves nothing behind");
        }
        Files.writeString(lock, "12\nnotes\n");
        assertContains(refused(socket).getMessage(), "refusing the lock file " + lock + ": it holds 9 bytes that are"
                + " not a daemon's pid");
        assertEquals("12\nnotes\n", Files.readString(lock), "left as it was");
    }

    /** The SHA-256 of an empty fingerprint: a MANIFEST's fingerprint_sha256 must be that of the fingerprint it carries. */
    private static byte[] sha256OfNothing() {
        try {
            return java.security.MessageDigest.getInstance("SHA-256").digest(new byte[0]);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
