package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import io.engramhost.json.JsonReader;
import io.engramhost.os.Posix;
import io.engramhost.os.ProcessProbe;
import io.engramhost.protocol.Expectation;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.Timeout;

/**
 * The Java client against a daemon that lies: every case of conformance/cases.json, which the Python package and the
 * C client run too. conformance/protocol_peer.py, a daemon side written from docs/protocol.md alone, serves one
 * connection as the case says, and the client accepts it (the case's tables, regions and bytes; the client's
 * {@link ImportedTables} does not show the protocol version, which the other two runners check) or refuses it, saying
 * what the case's "java" entry says, within its answer's deadline; either way it leaves no fd and no mapping open. A
 * case that gives the Java client neither an expectation nor a "skip" with its reason fails.
 */
@Timeout(180)
class HostileDaemonTest {
    private static final Path ROOT = Path.of(System.getProperty("user.dir")).getParent().getParent();
    private static final Path PEER = ROOT.resolve("conformance/protocol_peer.py");
    private static final Path CASES = ROOT.resolve("conformance/cases.json");
    private static final int NOBODY = 65534;
    private static final long PAGE = Posix.pageSize();
    private static final List<String> AS_NOBODY = List.of("setpriv", "--reuid=" + NOBODY, "--regid=" + NOBODY,
            "--clear-groups");
    /** The interpreter itself, not a shim on PATH (pyenv's costs half a second a start, 78 times). */
    private static final String PYTHON = python("python3");

    @TestFactory
    Stream<DynamicTest> everyCaseOfConformanceCases() throws IOException {
        Map<String, Object> doc = map(JsonReader.parse(Files.readAllBytes(CASES)));
        List<Object> cases = list(doc.get("cases"));
        // a case whose "java" says "skip" is not one for this client (its reason is in cases.json): no test, not a skip
        return cases.stream().map(HostileDaemonTest::map)
                .filter(c -> !(c.containsKey("java") && map(c.get("java")).containsKey("skip")))
                .map(c -> DynamicTest.dynamicTest(string(c, "name"), () -> run(c)));
    }

    private static void run(Map<String, Object> c) throws Exception {
        String name = string(c, "name");
        Map<String, Object> mine = c.containsKey("java") ? map(c.get("java")) : Map.of();
        boolean accepted = string(c, "outcome").equals("accepted");
        if (!accepted && !mine.containsKey("says") && !mine.containsKey("is")) {
            fail(name + ": cases.json gives the Java client no expectation and no 'skip' reason");
        }
        String requires = (String) c.get("requires");
        List<String> command = List.of(PYTHON);
        if ("another-uid".equals(requires)) {
            Assumptions.assumeTrue(euid() == 0 && onPath("setpriv"), "needs root and setpriv to run a peer as another uid");
            String python = nobodysPython();
            Assumptions.assumeTrue(python != null, "needs a python3 >= 3.9 that uid " + NOBODY + " can run");
            command = new ArrayList<>(AS_NOBODY);
            command.add(python);
        } else if ("not-uid-4242".equals(requires)) {
            Assumptions.assumeFalse(euid() == 4242, "the peer claims uid 4242, this process's own");
        } else if (requires != null) {
            fail(name + ": unknown requirement " + requires);
        }
        ClientOptions options = options(c);
        Path dir = Files.createTempDirectory("engram-hostile-");
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxrwxrwx")); // a peer of another uid binds here
        Path socket = dir.resolve("peer.sock");
        Path log = dir.resolve("peer.log");
        int fds = ProcessProbe.countOpenFds();
        long mappings = peerMappings();
        Process p = peer(command, socket, log, c.containsKey("peer") ? string(c, "peer") : name);
        try {
            long t0 = System.nanoTime();
            if (accepted) {
                Map<String, Object> want = map(c.get("accepted"));
                try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), options)) {
                    assertEquals(number(want, "tables"), t.tables().size(), name + ": tables");
                    assertEquals(number(want, "regions"), peerMappings() - mappings, name + ": one mapping a region");
                    assertEquals(number(want, "regions") * PAGE,
                            t.tables().values().stream().mapToLong(TableView::bytes).sum(), name + ": table bytes");
                }
            } else {
                RuntimeException e = assertThrows(RuntimeException.class,
                        () -> EngramClient.connect(socket, Expectation.any(), options).close(), name);
                refused(c, mine, e, socket);
            }
            double s = (System.nanoTime() - t0) / 1e9;
            if (c.containsKey("within_s")) {
                assertTrue(s < number(c, "within_s"), name + ": the client took " + s + " s");
            }
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), name + ": the peer did not exit: " + read(log));
            assertEquals(0, p.exitValue(), name + ": the peer failed: " + read(log));
            if (c.containsKey("peer_says")) {
                assertTrue(Pattern.compile(string(c, "peer_says")).matcher(read(log)).find(), read(log));
            }
        } finally {
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
            try (Stream<Path> files = Files.walk(dir)) {
                for (Path f : files.sorted(Comparator.reverseOrder()).toList()) {
                    Files.deleteIfExists(f);
                }
            }
        }
        assertEquals(mappings, peerMappings(), name + ": no mapping left");
        assertEquals(fds, ProcessProbe.countOpenFds(), name + ": no fd left open");
    }

    private static void refused(Map<String, Object> c, Map<String, Object> mine, RuntimeException e, Path socket) {
        String name = string(c, "name");
        String message = e.getMessage();
        if (mine.containsKey("is")) {
            assertEquals(string(mine, "is").replace("\n", System.lineSeparator()), message, name);
        }
        for (Object pattern : mine.containsKey("says") ? list(mine.get("says")) : List.of()) {
            Matcher m = Pattern.compile(fill((String) pattern, socket), Pattern.MULTILINE).matcher(message);
            assertTrue(m.find(), name + ": /" + pattern + "/ not in: " + message);
        }
        if (c.containsKey("error")) {
            Map<String, Object> error = map(c.get("error"));
            EngramClientException x = assertInstanceOf(EngramClientException.class, e, name);
            assertEquals(number(error, "code"), x.wireCode(), name + ": the ERROR's code");
            if (error.containsKey("details")) {
                assertEquals(error.get("details"), x.details(), name);
            }
            if (error.containsKey("detail_count")) {
                assertEquals(number(error, "detail_count"), x.details().size(), name);
            }
        }
    }

    private static ClientOptions options(Map<String, Object> c) {
        ClientOptions o = ClientOptions.defaults();
        Map<String, Object> given = c.containsKey("options") ? map(c.get("options")) : Map.of();
        if (given.containsKey("wait_ms")) {
            o = o.withNotReadyWait((int) number(given, "wait_ms"));
        }
        if (Boolean.TRUE.equals(given.get("accept_future_write_seal"))) {
            o = o.withFutureWriteSealAccepted(true);
        }
        if (given.containsKey("daemon_uids")) {
            List<Integer> uids = new ArrayList<>();
            for (Object u : list(given.get("daemon_uids"))) {
                uids.add(Integer.parseInt(fill(String.valueOf(u), null)));
            }
            o = o.withDaemonUids(uids);
        }
        return o; // "tables": this client attaches every table, and must refuse all the same
    }

    /** The peer serving one connection with {@code scenario} on {@code socket}, once it listens. */
    private static Process peer(List<String> python, Path socket, Path log, String scenario) throws Exception {
        List<String> command = new ArrayList<>(python);
        command.addAll(List.of(PEER.toString(), socket.toString(), scenario));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!Files.exists(socket)) {
            assertTrue(p.isAlive() && System.nanoTime() < deadline, "the peer did not listen: " + read(log));
            Thread.sleep(10);
        }
        return p;
    }

    /** The interpreter {@code candidate} runs (its sys.executable), or the candidate when it does not run. */
    private static String python(String candidate) {
        List<String> command = List.of(candidate, "-c",
                "import sys, socket; assert hasattr(socket, 'send_fds'); print(sys.executable)");
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes()).strip();
            return p.waitFor() == 0 && !out.isEmpty() ? out : candidate;
        } catch (IOException e) {
            return candidate;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return candidate;
        }
    }

    /** A python3 >= 3.9 that uid 65534 can run, or null. */
    private static String nobodysPython() {
        for (String c : List.of(PYTHON, "/usr/bin/python3", "/usr/local/bin/python3")) {
            if (Files.isExecutable(Path.of(c)) && runsAsNobody(c)) {
                return c;
            }
        }
        return null;
    }

    private static boolean runsAsNobody(String python) {
        List<String> command = new ArrayList<>(AS_NOBODY);
        command.addAll(List.of(python, "-c", "import sys, socket; sys.exit(0 if hasattr(socket, 'send_fds') else 1)"));
        try {
            return new ProcessBuilder(command).redirectErrorStream(true).start().waitFor() == 0;
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** The case's placeholders filled in (cases.json, "placeholders"); {socket} quoted for a regular expression. */
    private static String fill(String text, Path socket) {
        String s = text;
        Matcher m = Pattern.compile("\\{page([*-])(\\d+)\\}").matcher(s);
        StringBuilder b = new StringBuilder();
        while (m.find()) {
            long k = Long.parseLong(m.group(2));
            m.appendReplacement(b, Long.toString(m.group(1).equals("*") ? PAGE * k : PAGE - k));
        }
        m.appendTail(b);
        s = b.toString().replace("{page}", Long.toString(PAGE)).replace("{uid}", Integer.toString(euid()))
                .replace("{nobody}", Integer.toString(NOBODY));
        return socket == null ? s : s.replace("{socket}", Pattern.quote(socket.toString()));
    }

    /** This process's mappings of the peer's memfds (/proc/self/maps names them memfd:peer.N). */
    private static long peerMappings() throws IOException {
        try (Stream<String> lines = Files.lines(Path.of("/proc/self/maps"))) {
            return lines.filter(l -> l.contains("/memfd:peer.")).count();
        }
    }

    private static int euid() {
        try {
            return (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
        } catch (IOException e) {
            throw new IllegalStateException("cannot read the uid of /proc/self", e);
        }
    }

    private static boolean onPath(String program) {
        for (String d : System.getenv().getOrDefault("PATH", "").split(":")) {
            if (!d.isEmpty() && Files.isExecutable(Path.of(d, program))) {
                return true;
            }
        }
        return false;
    }

    private static String read(Path log) {
        try {
            return Files.exists(log) ? Files.readString(log) : "";
        } catch (IOException e) {
            return "(unreadable: " + e + ")";
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Object o) {
        return (List<Object>) o;
    }

    private static String string(Map<String, Object> m, String key) {
        return (String) m.get(key);
    }

    private static long number(Map<String, Object> m, String key) {
        return ((Number) m.get(key)).longValue();
    }
}
