package io.engramhost.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * How the peer clients are found: settings first, then the repository above the start directories; what each
 * failure names. The Python probe runs the real python3 (on PATH in CI) over stand-in packages.
 */
@Timeout(120)
class PeerClientsTest {
    @TempDir
    Path tmp;
    /**
     * An empty directory with no repository above it (surefire's temporary directories are inside this one, where
     * walking up finds the real package and engram-attach).
     */
    private Path outside;

    @BeforeEach
    void makeOutside() throws Exception {
        outside = Files.createTempDirectory(Path.of("/tmp"), "engram-peer-clients-");
    }

    @AfterEach
    void removeOutside() {
        InProcessDaemon.deleteTree(outside);
    }

    private final Map<String, String> props = new HashMap<>();
    private final Map<String, String> env = new HashMap<>();

    private PeerClients.Lookup lookup(Path... starts) {
        return new PeerClients.Lookup(props::get, env::get, List.of(starts));
    }

    /** A package directory holding engram_host with this __init__.py. */
    private Path pkg(String dir, String init) throws Exception {
        Path d = tmp.resolve(dir);
        Files.createDirectories(d.resolve("engram_host"));
        Files.writeString(d.resolve("engram_host/__init__.py"), init);
        return d;
    }

    private Path executable(String name, String body) throws Exception {
        Path p = tmp.resolve(name);
        Files.createDirectories(p.getParent());
        Files.writeString(p, "#!/bin/sh\n" + body + "\n");
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwx------"));
        return p;
    }

    @Test
    void shouldFindThePythonPackageBySettingThenByWalkingUp() throws Exception {
        Path repo = pkg("repo/python", "").getParent();
        Path deep = Files.createDirectories(repo.resolve("jmh/target/classes"));
        assertEquals(repo.resolve("python"), PeerClients.pythonPackage(lookup(outside, deep)), "from the second start");
        Path viaEnv = pkg("env", "");
        env.put(PeerClients.PYTHON_PATH_ENV, viaEnv.toString());
        assertEquals(viaEnv, PeerClients.pythonPackage(lookup(deep)), "the variable wins over the repository");
        Path viaProperty = pkg("prop", "");
        props.put(PeerClients.PYTHON_PATH_PROPERTY, viaProperty.toString());
        assertEquals(viaProperty, PeerClients.pythonPackage(lookup(deep)), "the property wins over the variable");
    }

    @Test
    void shouldNameWhereThePythonPackageWasLookedFor() throws Exception {
        Path empty = outside;
        IllegalStateException none = assertThrows(IllegalStateException.class, () -> PeerClients.pythonPackage(lookup(empty)));
        assertTrue(none.getMessage().startsWith("the Python client's package engram_host was not found: engram.python.path"
                + " and ENGRAM_HOST_PYTHONPATH are unset and no python/engram_host/__init__.py is in " + empty
                + " or above it") && none.getMessage().contains("-Dengram.python.path=<repository>/python"),
                none.getMessage());

        env.put(PeerClients.PYTHON_PATH_ENV, empty.toString());
        IllegalStateException wrong = assertThrows(IllegalStateException.class, () -> PeerClients.pythonPackage(lookup()));
        assertEquals("the Python client's package engram_host is not in ENGRAM_HOST_PYTHONPATH=" + empty + " (no "
                + empty.resolve("engram_host/__init__.py") + ")", wrong.getMessage());

        Path holder = pkg("holder", "");
        props.put(PeerClients.PYTHON_PATH_PROPERTY, holder.resolve("engram_host").toString());
        IllegalStateException itself = assertThrows(IllegalStateException.class, () -> PeerClients.pythonPackage(lookup()));
        assertTrue(itself.getMessage().startsWith("the Python client's package engram_host is not in engram.python.path=")
                && itself.getMessage().endsWith("it is the package itself: name the directory that holds it, " + holder),
                itself.getMessage());
    }

    @Test
    void shouldFindTheInterpreterOnPathOrAsNamed() throws Exception {
        Path py = executable("bin/python3", "exit 0");
        Path empty = Files.createDirectories(tmp.resolve("nobin"));
        env.put("PATH", empty + ":" + py.getParent());
        assertEquals(py, PeerClients.pythonInterpreter(lookup()));

        env.put("PATH", empty.toString());
        IllegalStateException none = assertThrows(IllegalStateException.class, () -> PeerClients.pythonInterpreter(lookup()));
        assertEquals("the Python interpreter was not found: engram.python and ENGRAM_HOST_PYTHON are unset and no python3"
                + " is on PATH (" + empty + "); name one with -Dengram.python=/path/to/python3", none.getMessage());

        env.put(PeerClients.PYTHON_ENV, py.toString());
        assertEquals(py, PeerClients.pythonInterpreter(lookup()), "a path needs no PATH");
        props.put(PeerClients.PYTHON_PROPERTY, tmp.resolve("missing/python3").toString());
        IllegalStateException missing = assertThrows(IllegalStateException.class, () -> PeerClients.pythonInterpreter(lookup()));
        assertEquals("the Python interpreter was not found: engram.python=" + tmp.resolve("missing/python3")
                + " is not an executable file", missing.getMessage());
    }

    @Test
    void shouldCheckThatTheInterpreterImportsThePackageFromItsDirectory() throws Exception {
        Path ok = pkg("ok", "");
        props.put(PeerClients.PYTHON_PATH_PROPERTY, ok.toString());
        env.put("PATH", System.getenv("PATH"));
        env.put("PYTHONPATH", "/inherited");
        PeerClients.Python py = PeerClients.python(false, lookup());
        assertTrue(py.interpreter().isAbsolute() && Files.isExecutable(py.interpreter()), py.describe());
        assertTrue(py.version().startsWith("3."), py.describe());
        assertEquals(ok, py.packageDir());
        assertNull(py.torchVersion(), "torch was not asked for");
        assertEquals(Map.of("PYTHONPATH", ok + ":/inherited"), py.environment());

        props.put(PeerClients.PYTHON_PATH_PROPERTY, pkg("broken", "raise RuntimeError('broken on purpose')").toString());
        IllegalStateException broken = assertThrows(IllegalStateException.class, () -> PeerClients.python(false, lookup()));
        assertTrue(broken.getMessage().startsWith("the Python client's package cannot be imported: ")
                && broken.getMessage().endsWith("fails `import engram_host`: RuntimeError: broken on purpose"),
                broken.getMessage());

        props.put(PeerClients.PYTHON_PATH_PROPERTY, ok.toString());
        Path bad = executable("bad/python3", "echo 'cannot run here' >&2; exit 3");
        props.put(PeerClients.PYTHON_PROPERTY, bad.toString());
        IllegalStateException failing = assertThrows(IllegalStateException.class, () -> PeerClients.python(false, lookup()));
        assertTrue(failing.getMessage().startsWith("the Python interpreter " + bad + " failed its check (exit status 3)")
                && failing.getMessage().contains("cannot run here"), failing.getMessage());
    }

    @Test
    void shouldCompileACopyOfThePackageForTheChildren() throws Exception {
        Path src = pkg("src", "from .sub import VALUE\n");
        Files.createDirectories(src.resolve("engram_host/sub"));
        Files.writeString(src.resolve("engram_host/sub/__init__.py"), "VALUE = 42\n");
        Files.writeString(src.resolve("engram_host/notes.txt"), "not Python");
        props.put(PeerClients.PYTHON_PATH_PROPERTY, src.toString());
        env.put("PATH", System.getenv("PATH"));
        env.put("PYTHONPATH", "/inherited");
        PeerClients.Python py = PeerClients.python(false, lookup());
        Path copy = tmp.resolve("scratch/python");
        PeerClients.Python compiled = py.compiledCopy(copy);
        assertEquals(copy, compiled.packageDir());
        assertEquals(Map.of("PYTHONPATH", copy + ":/inherited"), compiled.environment());
        assertEquals(py.interpreter(), compiled.interpreter());
        for (String module : List.of("engram_host", "engram_host/sub")) {
            try (var pyc = Files.list(copy.resolve(module).resolve("__pycache__"))) {
                assertEquals(1, pyc.filter(f -> f.getFileName().toString().startsWith("__init__.")
                        && f.toString().endsWith(".pyc")).count(), module + " compiled in the copy");
            }
            assertTrue(Files.notExists(src.resolve(module).resolve("__pycache__")), "the sources stay as they were");
        }
        assertTrue(Files.notExists(copy.resolve("engram_host/notes.txt")), "only Python sources are copied");
        PeerClients.Ran r = PeerClients.run(List.of(compiled.interpreter().toString(), "-c",
                "import engram_host; print(engram_host.VALUE, engram_host.__file__)"), compiled.environment(), "import");
        assertEquals(0, r.status(), r.output());
        assertEquals("42 " + copy.resolve("engram_host/__init__.py"), r.stdout().strip());
    }

    @Test
    void shouldFindEngramAttachByVariableOrByWalkingUp() throws Exception {
        Path attach = executable("repo/native/build/engram-attach", "exit 0");
        Path deep = Files.createDirectories(tmp.resolve("repo/jmh/target"));
        assertEquals(attach, PeerClients.engramAttach(lookup(deep)));
        Path empty = outside;
        IllegalStateException none = assertThrows(IllegalStateException.class, () -> PeerClients.engramAttach(lookup(empty)));
        assertTrue(none.getMessage().startsWith("the C client engram-attach was not found: ENGRAM_ATTACH is unset and no"
                + " native/build/engram-attach is in " + empty + " or above it"), none.getMessage());
        env.put(PeerClients.ATTACH_ENV, empty.toString() + "/engram-attach");
        IllegalStateException notExecutable = assertThrows(IllegalStateException.class,
                () -> PeerClients.engramAttach(lookup(deep)));
        assertEquals("ENGRAM_ATTACH=" + empty + "/engram-attach is not an executable file", notExecutable.getMessage());
    }

    @Test
    void shouldFindTheCAttachLibraryByVariableOrByWalkingUp() throws Exception {
        Path lib = tmp.resolve("repo/native/build/libengram-attach-bench.so");
        Files.createDirectories(lib.getParent());
        Files.writeString(lib, "not really a library: only found");
        Path deep = Files.createDirectories(tmp.resolve("repo/jmh/target"));
        assertEquals(lib, PeerClients.attachLibrary(lookup(deep)));
        IllegalStateException none = assertThrows(IllegalStateException.class, () -> PeerClients.attachLibrary(lookup(outside)));
        assertEquals("the C attach library libengram-attach-bench.so was not found: ENGRAM_ATTACH_LIB is unset and no"
                + " native/build/libengram-attach-bench.so is in " + outside + " or above it; build it with"
                + " `make -C native engram-attach-bench-lib`", none.getMessage());
        env.put(PeerClients.ATTACH_LIBRARY_ENV, outside.toString());
        IllegalStateException directory = assertThrows(IllegalStateException.class,
                () -> PeerClients.attachLibrary(lookup(deep)));
        assertEquals("ENGRAM_ATTACH_LIB=" + outside + " is not a file", directory.getMessage());
    }
}
