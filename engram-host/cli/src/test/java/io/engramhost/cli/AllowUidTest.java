package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.os.Posix;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Other uids: the socket is private unless --allow-uid opens it, and then SO_PEERCRED admits only the listed uids. The
 * clients run as the user nobody (setpriv): the C client of the wire protocol (native/build/engram-attach), the Python
 * package (Debian's /usr/bin/python3, with python/ on its path) and the Java client (the CLI's import, on the CLI's
 * runtime class path copied where the user nobody can read it: nobody cannot read root's Maven repository, where the
 * tests' class path is; the copy is made in the test phase, so mvn verify runs these tests before the package phase
 * builds app/lib). A client refused by the file system (EACCES) says in one line which directory or socket shuts it
 * out, with its mode and owner, and that the daemon must admit its uid with --allow-uid. A socket directory the daemon
 * creates with --allow-uid is 0711, so that an admitted uid reaches the socket; one it did not create and that no
 * admitted uid can search is refused at start, leaving nothing behind.
 */
@Timeout(240)
class AllowUidTest {
    // user.dir is this module, engram-host/cli: the C client is built two levels up, in native/build.
    private static final Path ROOT = Path.of(System.getProperty("user.dir")).toAbsolutePath().getParent().getParent();
    private static final Path C_CLIENT = ROOT.resolve("native/build/engram-attach");
    private static final Path PYTHON = Path.of("/usr/bin/python3");
    /** The CLI's runtime class path, as the cli pom writes it at generate-test-resources. */
    private static final Path CLI_CLASSPATH = Path.of("target/cli-classpath.txt");
    private static final int NOBODY = 65534;
    /** {@link #CLI_CLASSPATH}'s entries and this module's classes, copied into a directory the user nobody can read. */
    private static Path copiedClasspath;

    /**
     * A class path of the CLI that the user nobody can read: each entry of {@link #CLI_CLASSPATH} (jars, or the classes
     * directories of the reactor's other modules when Maven stops before their package phase) and target/classes,
     * copied once into a directory of /tmp that is readable by all and deleted after the tests.
     */
    private static synchronized String javaClasspath() throws IOException {
        if (copiedClasspath == null) {
            Path dir = Files.createTempDirectory(Path.of("/tmp"), "engram-uid-cp-");
            List<Path> entries = new ArrayList<>();
            for (String e : Files.readString(CLI_CLASSPATH).strip().split(File.pathSeparator)) {
                entries.add(Path.of(e));
            }
            entries.add(Path.of("target/classes"));
            for (int i = 0; i < entries.size(); i++) {
                Path src = entries.get(i);
                Path dst = dir.resolve(i + "-" + src.getFileName());
                try (Stream<Path> tree = Files.walk(src)) {
                    for (Path f : (Iterable<Path>) tree::iterator) {
                        Files.copy(f, dst.resolve(src.relativize(f).toString()));
                    }
                }
            }
            try (Stream<Path> tree = Files.walk(dir)) {
                for (Path f : (Iterable<Path>) tree::iterator) {
                    Files.setPosixFilePermissions(f, PosixFilePermissions.fromString(Files.isDirectory(f)
                            ? "rwxr-xr-x" : "rw-r--r--"));
                }
            }
            copiedClasspath = dir;
        }
        StringBuilder cp = new StringBuilder();
        try (Stream<Path> top = Files.list(copiedClasspath)) {
            for (Path p : (Iterable<Path>) top.sorted()::iterator) {
                cp.append(cp.length() == 0 ? "" : File.pathSeparator).append(p);
            }
        }
        return cp.toString();
    }

    @AfterAll
    static void deleteCopiedClasspath() throws Exception {
        if (copiedClasspath != null) {
            delete(copiedClasspath);
        }
    }

    private static Path sharedDir() throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "engram-uid-");
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxr-xr-x"));
        return dir;
    }

    private static Path checkpoint(Path dir) throws Exception {
        Path ckpt = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 500, 64, 1));
        Files.setPosixFilePermissions(dir.resolve("ckpt"), PosixFilePermissions.fromString("rwxr-xr-x"));
        return ckpt;
    }

    /** {@code command} run as nobody: "EXIT: OUTPUT". */
    private static String asNobody(String... command) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("setpriv", "--reuid=" + NOBODY, "--regid=" + NOBODY, "--clear-groups",
                "env", "HOME=/tmp", "PYTHONPATH=" + ROOT.resolve("python")));
        cmd.addAll(List.of(command));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        return p.exitValue() + ": " + out;
    }

    private static String cClient(Path socket) throws Exception {
        return asNobody(C_CLIENT.toString(), "--socket", socket.toString());
    }

    private static final String PY_IMPORT = "import sys, engram_host\n"
            + "try:\n"
            + "    with engram_host.connect(sys.argv[1]) as t:\n"
            + "        print('imported', len(t.tables))\n"
            + "except engram_host.EngramHostError as e:\n"
            + "    print(type(e).__name__ + ': ' + str(e)); sys.exit(1)\n";

    private static String pythonClient(Path socket) throws Exception {
        return asNobody(PYTHON.toString(), "-c", PY_IMPORT, socket.toString());
    }

    private static String javaClient(Path socket) throws Exception {
        return asNobody(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp", javaClasspath(),
                Main.class.getName(), "import", "--socket", socket.toString());
    }

    private static void assumeRootAndClients() {
        assumeTrue(Posix.getuid() == 0, "needs root to run a client as another uid (uid is " + Posix.getuid() + ")");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")), "needs setpriv (util-linux)");
        assumeTrue(Files.isExecutable(C_CLIENT), C_CLIENT + " is not built: make -C native engram-attach");
        assumeTrue(Files.isExecutable(PYTHON), "needs " + PYTHON + " (a python3 that nobody can run)");
    }

    private static List<String> list(Path dir) throws Exception {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    private static void delete(Path dir) throws Exception {
        try (var s = Files.walk(dir)) {
            s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    @Test
    void shouldAdmitOnlyTheListedUidsAndTellARefusedClientWhatToDo() throws Exception {
        assumeRootAndClients();
        Path dir = sharedDir();
        try {
            Path ckpt = checkpoint(dir);
            Path privateSocket = dir.resolve("private/p.sock");
            try (DaemonProcess d = DaemonProcess.start(privateSocket, dir.resolve("p.log"), "--checkpoint",
                    ckpt.toString()).awaitReady()) {
                assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(privateSocket.getParent())));
                String what = "uid " + NOBODY + " may not search " + privateSocket.getParent() + " (mode 0700, owner uid 0"
                        + " (root), group 0 (root)): the daemon must admit uid " + NOBODY + " (serve --allow-uid " + NOBODY
                        + "), and " + privateSocket.getParent() + " must let it search (chmod o+x "
                        + privateSocket.getParent() + ", or g+x with uid " + NOBODY + " in its group; a socket directory"
                        + " the daemon creates with --allow-uid is mode 0711)";
                String c = cClient(privateSocket);
                assertTrue(c.startsWith("1: engram-attach: cannot connect to " + privateSocket + ": EACCES (Permission"
                        + " denied): " + what), "the C client says what to do: " + c);
                assertEquals(1, c.strip().lines().count(), "one line: " + c);
                String py = pythonClient(privateSocket);
                assertTrue(py.startsWith("1: EngramHostError: cannot connect to " + privateSocket + ": EACCES"
                        + " (Permission denied): " + what), "the Python client says the same: " + py);
                String java = javaClient(privateSocket);
                assertTrue(java.startsWith("1: ") && java.contains("cannot connect to " + privateSocket + ": EACCES"
                        + " (Permission denied): " + what), "and the Java client, in the same words: " + java);
                // a probe that cannot reach the socket says why, not that there is none (stat fails with EACCES too)
                String probe = asNobody(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp",
                        javaClasspath(), Main.class.getName(), "status", "--ready", "--socket", privateSocket.toString());
                assertEquals("1: not ready: cannot connect to " + privateSocket + ": EACCES (Permission denied): " + what
                        + "\n", probe, "status --ready");
            }
            // the directory is searchable, the socket is not: 0600 without --allow-uid
            Path open = Files.createDirectory(dir.resolve("searchable"));
            Files.setPosixFilePermissions(open, PosixFilePermissions.fromString("rwxr-xr-x"));
            try (DaemonProcess d = DaemonProcess.start(open.resolve("s.sock"), dir.resolve("s.log"), "--checkpoint",
                    ckpt.toString()).awaitReady()) {
                String py = pythonClient(open.resolve("s.sock"));
                assertTrue(py.startsWith("1: EngramHostError: cannot connect to " + open.resolve("s.sock") + ": EACCES"
                        + " (Permission denied): the socket (mode 0600, owner uid 0 (root), group 0 (root)) lets only its"
                        + " owner connect: the daemon must admit uid " + NOBODY + " (serve --allow-uid " + NOBODY + ");"
                        + " the socket is then mode 0666 and each peer's uid is checked"), py);
                String c = cClient(open.resolve("s.sock"));
                assertTrue(c.startsWith("1: engram-attach: cannot connect to " + open.resolve("s.sock") + ": EACCES"
                        + " (Permission denied): the socket (mode 0600, owner uid 0 (root), group 0 (root)) lets only its"
                        + " owner connect: the daemon must admit uid " + NOBODY), c);
            }
            Path listed = dir.resolve("open/o.sock");
            try (DaemonProcess d = DaemonProcess.start(listed, dir.resolve("o.log"), "--checkpoint", ckpt.toString(),
                    "--allow-uid", "12345").awaitReady()) {
                String r = cClient(listed);
                assertTrue(r.startsWith("1: ") && r.contains("NOT_ALLOWED") && r.contains("uid " + NOBODY),
                        "an unlisted uid is refused by SO_PEERCRED: " + r);
                assertTrue(d.log().contains("refused pid") && d.log().contains("uid " + NOBODY), d.log());
                String py = pythonClient(listed);
                assertTrue(py.startsWith("1: NotAllowed: "), "the Python client too: " + py);
            }
            Path ok = dir.resolve("ok/k.sock");
            try (DaemonProcess d = DaemonProcess.start(ok, dir.resolve("k.log"), "--checkpoint", ckpt.toString(),
                    "--allow-uid", Integer.toString(NOBODY)).awaitReady()) {
                assertEquals("rwx--x--x", PosixFilePermissions.toString(Files.getPosixFilePermissions(ok.getParent())),
                        "the directory the daemon made lets others search it, not list it");
                assertEquals("rw-rw-rw-", PosixFilePermissions.toString(Files.getPosixFilePermissions(ok)));
                assertTrue(cClient(ok).startsWith("0: "), "a listed uid imports with the C client");
                String py = pythonClient(ok);
                assertTrue(py.matches("0: imported [1-9]\\d*\n"), "and with the Python client: " + py);
                String java = javaClient(ok);
                assertTrue(java.startsWith("0: "), "and with the Java client: " + java);
                String ls = asNobody("ls", ok.getParent().toString());
                assertTrue(ls.startsWith("2: ") && ls.contains("Permission denied"), "but cannot list it: " + ls);
            }
        } finally {
            delete(dir);
        }
    }

    /**
     * --allow-uid keeps the mode of a socket directory that exists (it sets 0711 only on one it creates): one that
     * neither its group nor others may search (0700, say left by a daemon started without --allow-uid) shuts the
     * admitted uids out whatever a group or an ACL says, so the daemon refuses to start, naming the directory, its
     * mode, the uid and the fix, and leaves the directory as it was. One only its group may search (0710) may still
     * let them in through the group or an ACL: a warning. A 0755 one gets neither.
     */
    @Test
    void shouldRefuseAnExistingSocketDirectoryThatShutsTheAdmittedUidsOut() throws Exception {
        Path dir = sharedDir();
        try {
            Path ckpt = checkpoint(dir);
            Path closed = Files.createDirectory(dir.resolve("closed"));
            Files.setPosixFilePermissions(closed, PosixFilePermissions.fromString("rwx------"));
            Files.writeString(closed.resolve("keep.txt"), "a file of the user's\n");
            try (DaemonProcess d = DaemonProcess.start(closed.resolve("c.sock"), dir.resolve("c.log"), "--checkpoint",
                    ckpt.toString(), "--allow-uid", Integer.toString(NOBODY))) {
                assertTrue(d.process.waitFor(60, TimeUnit.SECONDS));
                assertEquals(1, d.process.exitValue(), d.log());
                assertTrue(d.log().contains("engram-host serve: --allow-uid " + NOBODY + ": " + closed + " (rwx------,"
                        + " owner uid 0 (root)) is not searchable by uid " + NOBODY + ", so it could not reach the socket"
                        + " (EACCES): chmod o+x " + closed + " (or g+x, with uid " + NOBODY + " in its group), or choose a"
                        + " --socket in a directory it can search (one the daemon creates there gets mode 0711)"), d.log());
                assertEquals(List.of("keep.txt"), list(closed), "nothing left behind");
                assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(closed)),
                        "nor chmod'ed: the directory is the user's");
            }
            Path group = Files.createDirectory(dir.resolve("group"));
            Files.setPosixFilePermissions(group, PosixFilePermissions.fromString("rwx--x---"));
            try (DaemonProcess d = DaemonProcess.start(group.resolve("g.sock"), dir.resolve("g.log"), "--checkpoint",
                    ckpt.toString(), "--allow-uid", Integer.toString(NOBODY)).awaitReady()) {
                assertTrue(d.log().contains("WARN: --allow-uid: " + group + " (rwx--x---, owner uid 0 (root)) is not"
                        + " searchable by other users, so the admitted uid " + NOBODY + " cannot reach the socket unless"
                        + " its group or an ACL lets it: chmod o+x " + group), d.log());
                if (Posix.getuid() == 0 && Files.isExecutable(Path.of("/usr/bin/setpriv")) && Files.isExecutable(C_CLIENT)) {
                    String r = cClient(group.resolve("g.sock"));
                    assertTrue(r.startsWith("1: ") && r.contains("EACCES") && r.contains("may not search " + group
                            + " (mode 0710"), "what the warning is about: " + r);
                }
            }
            Path open = Files.createDirectory(dir.resolve("open"));
            Files.setPosixFilePermissions(open, PosixFilePermissions.fromString("rwxr-xr-x"));
            try (DaemonProcess d = DaemonProcess.start(open.resolve("o.sock"), dir.resolve("o.log"), "--checkpoint",
                    ckpt.toString(), "--allow-uid", Integer.toString(NOBODY)).awaitReady()) {
                assertFalse(d.log().contains("not searchable"), d.log());
            }
        } finally {
            delete(dir);
        }
    }

    /**
     * A user's client that names no socket, has none at its own default and may not search the system daemon's
     * directory (root's daemon made /run/engram-host 0700, without --allow-uid) cannot tell whether root's daemon
     * serves the node: it keeps its own default and says, in one line, what root's daemon needs to serve it.
     */
    @Test
    void shouldTellAUserShutOutOfTheSystemDaemonsDirectoryWhatItNeeds() throws Exception {
        assumeRootAndClients();
        Path run = Path.of("/run/engram-host");
        boolean made = !Files.exists(run);
        assumeTrue(made || !Files.getPosixFilePermissions(run).contains(PosixFilePermission.OTHERS_EXECUTE),
                run + " is searchable by others on this machine: nothing to tell");
        Path dir = sharedDir();
        String instance = "allow-uid-test-" + ProcessHandle.current().pid();
        Path system = run.resolve(instance + ".sock");
        try (DaemonProcess d = DaemonProcess.start(system, dir.resolve("s.log"), "--checkpoint",
                checkpoint(dir).toString()).awaitReady()) {
            Path own = Path.of("/tmp/engram-host-" + NOBODY, instance + ".sock");
            String note = "no daemon socket at " + own + " (this user's default), and uid " + NOBODY + " may not search "
                    + run + " for the system daemon's " + system + ": if root's daemon serves this node, it must admit"
                    + " uid " + NOBODY + " (serve --allow-uid " + NOBODY + ") and " + run + " must let it search (chmod"
                    + " o+x " + run + "); --socket or ENGRAM_HOST_SOCKET chooses another";
            String java = asNobody("env", "-u", "XDG_RUNTIME_DIR", "-u", "ENGRAM_HOST_SOCKET",
                    Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp", javaClasspath(),
                    Main.class.getName(), "import", "--instance", instance);
            assertTrue(java.startsWith("1: engram-host: " + note + "\n"), "the Java client: " + java);
            String py = asNobody("env", "-u", "XDG_RUNTIME_DIR", "-u", "ENGRAM_HOST_SOCKET", PYTHON.toString(), "-c",
                    "import logging, sys, engram_host\n"
                    + "logging.basicConfig(format='%(message)s')\n"
                    + "try:\n"
                    + "    engram_host.connect(instance=sys.argv[1])\n"
                    + "except engram_host.DaemonAbsent as e:\n"
                    + "    print('DaemonAbsent'); sys.exit(1)\n", instance);
            assertEquals("1: " + note + "\nDaemonAbsent\n", py, "the Python client");
        } finally {
            Files.deleteIfExists(run.resolve(instance + ".sock.lock"));
            if (made) {
                Files.deleteIfExists(run);
            }
            delete(dir);
        }
    }
}
