package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.ContentCheck;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.json.JsonReader;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --takeover} between separate processes (docs/protocol.md, "Handing over to a successor daemon"):
 * under load, killed at each step of the handover, refused, and repeated.
 */
@Timeout(300)
class TakeoverProcessTest {

    private static Path checkpoint(Path dir) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 14), 3000, 256, 9));
    }

    private static DaemonProcess serve(Path socket, Path log, Path ckpt, Map<String, String> env, String... more)
            throws Exception {
        List<String> args = new ArrayList<>(List.of("--checkpoint", ckpt.toString()));
        args.addAll(List.of(more));
        return DaemonProcess.startWithEnvironment(env, socket, log, args.toArray(String[]::new));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> status(Path socket) {
        return (Map<String, Object>) JsonReader.parse(EngramClient.status(socket, ClientOptions.defaults()));
    }

    /** The tables served on {@code socket} match the checkpoint byte for byte (engram digests against the files). */
    private static void assertServesTheCheckpoint(Path socket, Path ckpt) {
        assertServesTheCheckpoint(socket, ckpt, ClientOptions.defaults());
    }

    private static void assertServesTheCheckpoint(Path socket, Path ckpt, ClientOptions options) {
        try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), options)) {
            ContentCheck.Report r = ContentCheck.verify(t, ContentCheck.fromCheckpoint(List.of(ckpt), t.tables().keySet(),
                    1), 1);
            assertEquals(r.tables().size(), r.verified());
        }
    }

    private static int readyPid(Path socket) {
        String pid = ReadyFile.read(SocketPaths.readyFile(socket)).get("pid");
        return pid == null ? -1 : Integer.parseInt(pid);
    }

    private static void awaitExit(DaemonProcess d, int status) throws Exception {
        assertTrue(d.process.waitFor(30, TimeUnit.SECONDS), "pid " + d.pid() + " did not exit: " + d.log());
        assertEquals(status, d.process.exitValue(), d.log());
    }

    private static void awaitLog(DaemonProcess d, String text) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!d.log().contains(text)) {
            assertTrue(System.nanoTime() < deadline, "no '" + text + "' in the log of pid " + d.pid() + ": " + d.log());
            Thread.sleep(10);
        }
    }

    @Test
    void takeoverUnderLoadKeepsEveryLeaseAndEveryImport(@TempDir Path dir) throws Exception {
        takeoverUnderLoad(dir, "memfd", false);
    }

    /**
     * 16 client leases held and 4 clients importing in a loop (a separate process, {@link TakeoverLoad}; with
     * {@code gpu}, every import with GPU views and a CPU view) while {@code serve --takeover} replaces the daemon of
     * {@code backend}: every import succeeds and every digest matches, no onDaemonGone fires, the old pid exits 0, the
     * new one lists the leases and read nothing from the checkpoint. {@link TakeoverGpuTest} runs it on a GPU.
     */
    @SuppressWarnings("unchecked")
    static void takeoverUnderLoad(Path dir, String backend, boolean gpu) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/t.sock");
        try (DaemonProcess a = serve(socket, dir.resolve("a.log"), ckpt, Map.of(), "--backend", backend).awaitReady()) {
            List<String> cmd = new ArrayList<>(ChildJvm.command());
            cmd.set(cmd.size() - 1, TakeoverLoad.class.getName()); // the same JVM and class path, another main
            cmd.addAll(List.of(socket.toString(), ckpt.toString(), "16", "4", gpu ? "gpu" : "cpu"));
            Process load = new ProcessBuilder(cmd).redirectError(dir.resolve("load.err").toFile()).start();
            try {
                BufferedReader out = new BufferedReader(new InputStreamReader(load.getInputStream(), StandardCharsets.UTF_8));
                assertEquals("leases 16", out.readLine());
                String line;
                while ((line = out.readLine()) != null && !line.equals("imports 20")) {
                    // let the importers run before the takeover
                }
                Map<String, Object> before = status(socket);
                List<Object> leasesBefore = (List<Object>) before.get("leases");
                assertTrue(leasesBefore.size() >= 16 && leasesBefore.size() <= 20, "16 held, and the importers' own: "
                        + leasesBefore.size());

                try (DaemonProcess b = serve(socket, dir.resolve("b.log"), ckpt, Map.of(), "--backend", backend,
                        "--takeover").awaitReady()) {
                    awaitExit(a, 0);
                    assertTrue(a.log().contains("handed over to pid " + b.pid()), a.log());
                    awaitLog(b, "took over from pid " + a.pid());
                    long seen = 0;
                    while ((line = out.readLine()) != null && seen < 40) {
                        seen += line.startsWith("imports ") ? 10 : 0; // imports go on against the successor
                    }
                    Writer w = new OutputStreamWriter(load.getOutputStream(), StandardCharsets.UTF_8);
                    w.write("stop\n");
                    w.flush();
                    String last = null;
                    while ((line = out.readLine()) != null) {
                        last = line;
                    }
                    assertTrue(load.waitFor(60, TimeUnit.SECONDS));
                    Map<String, Object> result = (Map<String, Object>) JsonReader.parse(last);
                    assertEquals(List.of(), result.get("failures"), "every import succeeds and every digest matches");
                    assertEquals(List.of(), result.get("gone"), "no client's onDaemonGone fires");
                    assertEquals(16L, ((Number) result.get("open")).longValue());
                    assertTrue(((Number) result.get("imports")).longValue() >= 60, String.valueOf(result));

                    Map<String, Object> after = status(socket);
                    assertEquals((long) b.pid(), ((Number) after.get("pid")).longValue());
                    Map<String, Object> origin = (Map<String, Object>) after.get("origin");
                    assertEquals("takeover", origin.get("how"));
                    assertEquals(0L, ((Number) origin.get("checkpoint_bytes_read")).longValue());
                    assertEquals((int) b.pid(), readyPid(socket));
                    assertServesTheCheckpoint(socket, ckpt, gpu ? ClientOptions.defaults().withGpu(0, true)
                            : ClientOptions.defaults());
                    // the load client closed its leases at the end; before that, the successor listed the same ids
                    for (Object l : leasesBefore.subList(0, 16)) {
                        long id = ((Number) ((Map<String, Object>) l).get("id")).longValue();
                        assertTrue(b.log().contains("lease " + id + " of pid "), "lease " + id + " ends at the successor");
                    }
                }
            } finally {
                load.destroyForcibly();
            }
        }
    }

    @Test
    void theSuccessorListsTheLeasesItTookOver(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/l.sock");
        try (DaemonProcess a = serve(socket, dir.resolve("a.log"), ckpt, Map.of()).awaitReady();
                ImportedTables held = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
            List<String> fired = new ArrayList<>();
            held.onDaemonGone(fired::add);
            Object before = status(socket).get("leases");
            try (DaemonProcess b = serve(socket, dir.resolve("b.log"), ckpt, Map.of(), "--takeover").awaitReady()) {
                awaitExit(a, 0);
                assertEquals(before, status(socket).get("leases"), "the same ids, pids, uids and times");
                try (ImportedTables after = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
                    assertEquals(b.process.pid(), after.daemonPid(), "SO_PEERCRED names the successor (it listened again)");
                }
                Thread.sleep(300);
                assertEquals(List.of(), fired);
                assertEquals(null, held.daemonGoneReason());
                b.process.destroy(); // the successor stops: now the lease ends
                assertTrue(b.process.waitFor(30, TimeUnit.SECONDS));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (fired.isEmpty() && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                assertEquals(1, fired.size(), "the lease's end is seen once the daemon that holds it stops");
            }
        }
    }

    /** SIGKILL the successor, or the predecessor, at each step: exactly one daemon serves, byte-exact, no fd leaked. */
    @Test
    void aKillAtAnyStepLeavesExactlyOneWorkingDaemon(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        String[][] cases = {
            {"successor", "ENGRAM_HOST_TEST_TAKEOVER_GATE", "catalog"},
            {"successor", "ENGRAM_HOST_TEST_TAKEOVER_GATE", "commit"},
            {"predecessor", "ENGRAM_HOST_TEST_HANDOVER_GATE", "accepted"},
            {"predecessor", "ENGRAM_HOST_TEST_HANDOVER_GATE", "ready"},
            {"predecessor", "ENGRAM_HOST_TEST_HANDOVER_GATE", "committed"},
        };
        int n = 0;
        for (String[] c : cases) {
            n++;
            Path socket = dir.resolve("run" + n + "/k.sock");
            Path gate = dir.resolve("gate" + n);
            boolean killSuccessor = c[0].equals("successor");
            Map<String, String> aEnv = killSuccessor ? Map.of() : Map.of(c[1], c[2] + ":" + gate);
            Map<String, String> bEnv = killSuccessor ? Map.of(c[1], c[2] + ":" + gate) : Map.of();
            try (DaemonProcess a = serve(socket, dir.resolve("a" + n + ".log"), ckpt, aEnv).awaitReady()) {
                List<String> fdsBefore = settledFds(a.pid(), null);
                try (DaemonProcess b = serve(socket, dir.resolve("b" + n + ".log"), ckpt, bEnv, "--takeover")) {
                    DaemonProcess held = killSuccessor ? b : a;
                    awaitLog(held, "held at '" + c[2] + "'");
                    held.process.destroyForcibly();
                    held.process.waitFor(30, TimeUnit.SECONDS);
                    DaemonProcess survivor = killSuccessor ? a : b;
                    if (!killSuccessor) {
                        survivor.awaitReady();
                    }
                    String what = c[0] + " killed at '" + c[2] + "'";
                    assertTrue(survivor.process.isAlive(), what + ": " + survivor.log());
                    assertEquals((int) survivor.pid(), readyPid(socket), what + ": the ready file names the survivor");
                    assertEquals(Long.toString(survivor.pid()), Files.readString(
                            io.engramhost.protocol.SocketPaths.lockFile(socket)).strip(), what
                            + ": the lock file names the survivor");
                    assertEquals((long) survivor.pid(), ((Number) status(socket).get("pid")).longValue(), what);
                    assertServesTheCheckpoint(socket, ckpt);
                    if (killSuccessor) {
                        assertTrue(a.log().contains("keeps serving"), a.log());
                        assertEquals(fdsBefore, settledFds(a.pid(), fdsBefore), what
                                + ": the predecessor's own fds are back where they were");
                    }
                    Files.writeString(gate, "go"); // nothing holds at the gate any more; open it for tidiness
                }
            }
        }
    }

    /**
     * Two successors asking at once: one takes over, the other is refused BUSY (or, if it asks only after the first
     * committed, takes over from it in turn); either way exactly one daemon serves at the end, and the lock and ready
     * files name it.
     */
    @Test
    void twoSuccessorsAtOnceLeaveExactlyOneDaemon(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/two.sock");
        try (DaemonProcess a = serve(socket, dir.resolve("a.log"), ckpt, Map.of()).awaitReady();
                DaemonProcess b = serve(socket, dir.resolve("b.log"), ckpt, Map.of(), "--takeover");
                DaemonProcess c = serve(socket, dir.resolve("c.log"), ckpt, Map.of(), "--takeover")) {
            assertTrue(a.process.waitFor(60, TimeUnit.SECONDS), "the first daemon hands over and exits: " + a.log());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (b.process.isAlive() && c.process.isAlive() && System.nanoTime() < deadline) {
                Thread.sleep(50); // the one refused, or taken over from, exits
            }
            DaemonProcess serving = b.process.isAlive() ? b : c;
            DaemonProcess other = serving == b ? c : b;
            assertTrue(other.process.waitFor(60, TimeUnit.SECONDS), "one of the two ends: " + other.log());
            assertTrue(serving.process.isAlive(), serving.log());
            String said = other.log();
            assertTrue(other.process.exitValue() == 0 && said.contains("handed over to pid " + serving.pid())
                    || other.process.exitValue() == 1 && said.contains("another takeover is under way"), said);
            // The successor rewrites the files once its predecessor has handed over (after HANDOVER_DONE), so a
            // predecessor that has just exited may still be named for a moment: wait for the truth, briefly.
            long named = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (readyPid(socket) != serving.pid() && System.nanoTime() < named) {
                Thread.sleep(20);
            }
            assertEquals((int) serving.pid(), readyPid(socket));
            assertEquals(Long.toString(serving.pid()), Files.readString(io.engramhost.protocol.SocketPaths.lockFile(socket))
                    .strip());
            assertServesTheCheckpoint(socket, ckpt);
        }
    }

    @Test
    void aTakeoverWithAnotherBackendIsRefusedAndThePredecessorServesOn(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/r.sock");
        try (DaemonProcess a = serve(socket, dir.resolve("a.log"), ckpt, Map.of()).awaitReady()) {
            CliRun r = CliRun.of("serve", "--socket", socket.toString(), "--numa", "none", "--checkpoint",
                    ckpt.toString(), "--takeover", "--backend", "memfd-hugetlb");
            String said = r.out() + r.err();
            assertNotEquals(0, r.exit(), said);
            assertTrue(said.contains("takeover refused by this successor"), said);
            assertTrue(said.contains("the daemon serves backend memfd, this successor was started with --backend"
                    + " memfd-hugetlb: start it with --backend memfd (a takeover keeps the backend; another one needs a"
                    + " stop and a load)"), "the refusal names the fix: " + said);
            awaitLog(a, "keeps serving");
            assertTrue(a.process.isAlive());
            assertServesTheCheckpoint(socket, ckpt);
        }
    }

    /** A successor of another handover layout, or one that does not speak every client version, is refused. */
    @Test
    void anIncompatibleTakeoverIsRefusedWithOneLine(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/v.sock");
        try (DaemonProcess a = serve(socket, dir.resolve("a.log"), ckpt, Map.of()).awaitReady()) {
            int[][] cases = {{2, 2, 1, 2}, {1, 1, 2, 2}};
            for (int[] c : cases) {
                try (RawClient r = RawClient.connect(socket)) {
                    r.handshake(2, 2);
                    r.send(new RawClient.Frame(16, 2).u16(c[0]).u16(c[1]).u16(c[2]).u16(c[3]).str16("9.9.9").bytes());
                    r.assertErrorThenClosed(5000, io.engramhost.protocol.ErrorCode.UNSUPPORTED_VERSION, 2,
                            "takeover refused", c[0] == 2 ? "layouts 2-2" : "protocol versions 2-2");
                }
            }
            assertTrue(a.process.isAlive());
            assertTrue(a.log().contains("takeover refused"), a.log());
            assertServesTheCheckpoint(socket, ckpt);
        }
    }

    /** Only the daemon's own uid or root may take it over: a client of an admitted uid gets NOT_ALLOWED. */
    @Test
    void anotherUidMayNotTakeOver(@TempDir Path ignored) throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(io.engramhost.os.Posix.getuid() == 0,
                "needs root to run a client as another uid");
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")), "needs setpriv");
        // the system's interpreter: one under /root (pyenv) is not reachable by another uid
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/python3")), "needs /usr/bin/python3");
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "engram-takeover-uid-");
        try {
            Files.setPosixFilePermissions(dir, java.nio.file.attribute.PosixFilePermissions.fromString("rwxr-xr-x"));
            Path ckpt = checkpoint(dir);
            Path socket = dir.resolve("open/u.sock");
            try (DaemonProcess a = serve(socket, dir.resolve("a.log"), ckpt, Map.of(), "--allow-uid", "65534")
                    .awaitReady()) {
                String py = String.join("\n",
                        "import socket, struct, sys",
                        "def frame(t, v, body): return struct.pack('<IHH', 0x4D524745, v, t) + body",
                        "def msg(f): return struct.pack('<II', len(f), 0) + f",
                        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])",
                        "def read():",
                        "    h = b''",
                        "    while len(h) < 8: h += s.recv(8 - len(h))",
                        "    n = struct.unpack('<I', h[:4])[0]; b = b''",
                        "    while len(b) < n: b += s.recv(n - len(b))",
                        "    return b",
                        "s.sendall(msg(frame(1, 1, struct.pack('<HHi', 2, 2, 0) + struct.pack('<H', 1) + b'x')))",
                        "read()",
                        "s.sendall(msg(frame(16, 2, struct.pack('<HHHH', 1, 1, 1, 2) + struct.pack('<H', 1) + b'y')))",
                        "b = read(); code = struct.unpack('<H', b[8:10])[0]; n = struct.unpack('<I', b[11:15])[0]",
                        "print(struct.unpack('<H', b[6:8])[0], code, b[15:15 + n].decode())");
                Process p = new ProcessBuilder("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                        "-c", py, socket.toString()).redirectErrorStream(true).start();
                String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
                assertTrue(p.waitFor(30, TimeUnit.SECONDS));
                assertTrue(out.startsWith("9 5 takeover refused: only uid"), "ERROR (9) NOT_ALLOWED (5): " + out);
                assertTrue(a.process.isAlive());
                assertServesTheCheckpoint(socket, ckpt);
            }
        } finally {
            try (java.util.stream.Stream<Path> all = Files.walk(dir)) {
                all.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    @Test
    void twentyTakeoversInARowLeaveFdsAndMemoryFlat(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir);
        Path socket = dir.resolve("run/x.sock");
        DaemonProcess current = serve(socket, dir.resolve("x0.log"), ckpt, Map.of()).awaitReady();
        try (ImportedTables held = EngramClient.connect(socket, Expectation.any(), ClientOptions.defaults())) {
            List<String> fired = new ArrayList<>();
            held.onDaemonGone(fired::add);
            List<String> fds = null;
            long shmem = -1;
            for (int i = 1; i <= 20; i++) {
                DaemonProcess next = serve(socket, dir.resolve("x" + i + ".log"), ckpt, Map.of(), "--takeover")
                        .awaitReady();
                awaitExit(current, 0);
                current = next;
                if (i == 2) {
                    awaitLog(current, "took over from pid");
                    fds = settledFds(current.pid(), null); // its connection to the predecessor closes just after
                    shmem = shmemKiB();
                }
            }
            awaitLog(current, "took over from pid");
            assertEquals(fds, settledFds(current.pid(), fds), "the daemon's fds of the 20th successor, as of the 2nd");
            assertTrue(shmemKiB() - shmem < 8 * 1024, "shared memory grew by " + (shmemKiB() - shmem) + " KiB");
            assertEquals(List.of(), fired);
            assertEquals(1, ((List<?>) status(socket).get("leases")).size());
            assertServesTheCheckpoint(socket, ckpt);
        } finally {
            current.close();
        }
    }

    /**
     * What a daemon's fds are, as a sorted list of kinds: its memfds by name, its sockets, its lock and directory,
     * the anon inodes of its poll loop. The JVM's own files (jars, /dev/random, cgroup files it opens for a moment)
     * are left out: a JVM opens some of them lazily, so two daemon processes differ in them without a leak.
     */
    private static List<String> daemonFds(long pid) throws Exception {
        List<String> out = new ArrayList<>();
        try (java.util.stream.Stream<Path> fds = Files.list(Path.of("/proc/" + pid + "/fd"))) {
            for (Path fd : fds.toList()) {
                String target;
                try {
                    target = Files.readSymbolicLink(fd).toString();
                } catch (java.io.IOException gone) {
                    continue;
                }
                if (target.startsWith("socket:")) {
                    out.add("socket");
                } else if (target.startsWith("anon_inode:")) {
                    out.add(target);
                } else if (target.startsWith("/memfd:") || target.endsWith(".lock") || target.contains("/run")) {
                    out.add(target.replaceAll("\\(deleted\\)", "").trim());
                }
            }
        }
        java.util.Collections.sort(out);
        return out;
    }

    /** The daemon's fds once they equal {@code expected} or stop changing for 300 ms (at most 10 s). */
    private static List<String> settledFds(long pid, List<String> expected) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        List<String> last = daemonFds(pid);
        long since = System.nanoTime();
        while (System.nanoTime() < deadline && !last.equals(expected)
                && System.nanoTime() - since < TimeUnit.MILLISECONDS.toNanos(300)) {
            Thread.sleep(20);
            List<String> now = daemonFds(pid);
            if (!now.equals(last)) {
                last = now;
                since = System.nanoTime();
            }
        }
        return last;
    }

    private static long shmemKiB() throws Exception {
        for (String l : Files.readAllLines(Path.of("/proc/meminfo"))) {
            if (l.startsWith("Shmem:")) {
                return Long.parseLong(l.replaceAll("[^0-9]", ""));
            }
        }
        throw new AssertionError("no Shmem in /proc/meminfo");
    }
}
