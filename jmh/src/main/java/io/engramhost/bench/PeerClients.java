package io.engramhost.bench;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.Predicate;
import java.util.stream.Stream;

/**
 * Where the benchmarks' peer clients are: the C client of the wire protocol ({@code native/c}),
 * and its attach code as a library, for the C baselines, and the Python client ({@code python/engram_host}) with an interpreter to run it, for
 * RestartBench's Python peer. Each is named by a system property or an environment variable (the GPU bundle names
 * them), else found in the repository: under the working directory or a directory above it, or under the
 * directory of this code's jar (or class folder) or one above it.
 */
final class PeerClients {
    static final String ATTACH_ENV = "ENGRAM_ATTACH";
    static final String ATTACH_LIBRARY_ENV = "ENGRAM_ATTACH_LIB";
    /** The directory that holds the {@code engram_host} package ({@code <repo>/python}). */
    static final String PYTHON_PATH_PROPERTY = "engram.python.path";
    static final String PYTHON_PATH_ENV = "ENGRAM_HOST_PYTHONPATH";
    /** The interpreter: a path, or a command looked up on PATH. */
    static final String PYTHON_PROPERTY = "engram.python";
    static final String PYTHON_ENV = "ENGRAM_HOST_PYTHON";
    static final String PYTHON_DEFAULT = "python3";
    static final long PROBE_TIMEOUT_MILLIS = 120_000;

    private PeerClients() {
    }

    /** Where a client is looked up: system properties, the environment, and the directories to search up from. */
    record Lookup(Function<String, String> properties, Function<String, String> environment, List<Path> starts) {
        /** This JVM's properties and environment; the working directory, then this code's location. */
        static Lookup system() {
            List<Path> starts = new ArrayList<>();
            starts.add(Path.of("").toAbsolutePath());
            codeLocation().filter(p -> !starts.contains(p)).ifPresent(starts::add);
            return new Lookup(System::getProperty, System::getenv, List.copyOf(starts));
        }

        /** The first of the property and the variable that is set (not blank): its name and value. */
        Optional<Map.Entry<String, String>> setting(String property, String env) {
            String p = properties.apply(property);
            if (p != null && !p.isBlank()) {
                return Optional.of(Map.entry(property, p));
            }
            String e = environment.apply(env);
            return e != null && !e.isBlank() ? Optional.of(Map.entry(env, e)) : Optional.empty();
        }

        /** {@code relative} under a start or a directory above one, the first that {@code ok} accepts. */
        Optional<Path> findUp(String relative, Predicate<Path> ok) {
            for (Path start : starts) {
                for (Path d = start; d != null; d = d.getParent()) {
                    Path p = d.resolve(relative);
                    if (ok.test(p)) {
                        return Optional.of(p);
                    }
                }
            }
            return Optional.empty();
        }

        String startsText() {
            return String.join(", ", starts.stream().map(Path::toString).toList());
        }
    }

    /** The directory of this code's jar, or its class folder; empty where the JVM does not say. */
    static Optional<Path> codeLocation() {
        try {
            CodeSource src = PeerClients.class.getProtectionDomain().getCodeSource();
            if (src == null || src.getLocation() == null) {
                return Optional.empty();
            }
            Path p = Path.of(src.getLocation().toURI()).toAbsolutePath();
            return Optional.ofNullable(Files.isDirectory(p) ? p : p.getParent());
        } catch (URISyntaxException | SecurityException | IllegalArgumentException e) {
            return Optional.empty();
        }
    }

    /** The C client: {@code $ENGRAM_ATTACH} when set (the GPU bundle sets it), else native/build/engram-attach. */
    static Path engramAttach() {
        return engramAttach(Lookup.system());
    }

    /**
     * {@code $ENGRAM_ATTACH} when set, else {@code native/build/engram-attach} in a start directory or one above it.
     *
     * @throws IllegalStateException naming the places and how to build it, when none has it
     */
    static Path engramAttach(Lookup l) {
        return built(l, ATTACH_ENV, "native/build/engram-attach", "the C client engram-attach", "engram-attach", true);
    }

    /**
     * The C attach library (AttachBench's C baseline, {@link CAttach}): {@code $ENGRAM_ATTACH_LIB} when set (the GPU
     * bundle sets it), else native/build/libengram-attach-bench.so.
     */
    static Path attachLibrary() {
        return attachLibrary(Lookup.system());
    }

    /**
     * {@code $ENGRAM_ATTACH_LIB} when set, else {@code native/build/libengram-attach-bench.so} in a start directory or one
     * above it.
     *
     * @throws IllegalStateException naming the places and how to build it, when none has it
     */
    static Path attachLibrary(Lookup l) {
        return built(l, ATTACH_LIBRARY_ENV, "native/build/" + CAttach.LIBRARY, "the C attach library " + CAttach.LIBRARY,
                "engram-attach-bench-lib", false);
    }

    /** What {@code native/Makefile}'s {@code target} builds: named by {@code env}, else found up at {@code relative}. */
    private static Path built(Lookup l, String env, String relative, String what, String target, boolean executable) {
        Predicate<Path> ok = p -> Files.isRegularFile(p) && (!executable || Files.isExecutable(p));
        String set = l.environment().apply(env);
        if (set != null && !set.isBlank()) {
            Path p = Path.of(set);
            if (!ok.test(p)) {
                throw new IllegalStateException(env + "=" + set + " is not " + (executable ? "an executable file" : "a file"));
            }
            return p;
        }
        return l.findUp(relative, ok).orElseThrow(() -> new IllegalStateException(what + " was not found: " + env
                + " is unset and no " + relative + " is in " + l.startsText() + " or above it; build it with `make -C native "
                + target + "`"));
    }

    /**
     * The directory holding the {@code engram_host} package, to put on PYTHONPATH: {@value #PYTHON_PATH_PROPERTY}, else
     * {@code $}{@value #PYTHON_PATH_ENV}, else {@code python/} (with {@code python/engram_host/__init__.py}) in a start
     * directory or one above it.
     *
     * @throws IllegalStateException naming what was looked at, when none holds the package
     */
    static Path pythonPackage(Lookup l) {
        Optional<Map.Entry<String, String>> set = l.setting(PYTHON_PATH_PROPERTY, PYTHON_PATH_ENV);
        if (set.isPresent()) {
            String name = set.get().getKey();
            Path dir = Path.of(set.get().getValue()).toAbsolutePath().normalize();
            if (holdsPackage(dir)) {
                return dir;
            }
            String hint = dir.getFileName() != null && dir.getFileName().toString().equals("engram_host")
                    && Files.isRegularFile(dir.resolve("__init__.py"))
                            ? "; it is the package itself: name the directory that holds it, " + dir.getParent()
                            : "";
            throw new IllegalStateException("the Python client's package engram_host is not in " + name + "=" + dir
                    + " (no " + dir.resolve("engram_host/__init__.py") + ")" + hint);
        }
        return l.findUp("python/engram_host/__init__.py", Files::isRegularFile).map(p -> p.getParent().getParent())
                .orElseThrow(() -> new IllegalStateException("the Python client's package engram_host was not found: "
                        + PYTHON_PATH_PROPERTY + " and " + PYTHON_PATH_ENV + " are unset and no"
                        + " python/engram_host/__init__.py is in " + l.startsText() + " or above it; pass"
                        + " -D" + PYTHON_PATH_PROPERTY + "=<repository>/python"));
    }

    private static boolean holdsPackage(Path dir) {
        return Files.isRegularFile(dir.resolve("engram_host").resolve("__init__.py"));
    }

    /**
     * The interpreter: {@value #PYTHON_PROPERTY}, else {@code $}{@value #PYTHON_ENV}, else {@value #PYTHON_DEFAULT};
     * a value with a '/' is a path, one without a command looked up on PATH.
     *
     * @throws IllegalStateException naming the setting or PATH, when it is not an executable file
     */
    static Path pythonInterpreter(Lookup l) {
        Optional<Map.Entry<String, String>> set = l.setting(PYTHON_PROPERTY, PYTHON_ENV);
        String value = set.map(Map.Entry::getValue).orElse(PYTHON_DEFAULT);
        String from = set.map(e -> e.getKey() + "=" + e.getValue())
                .orElse(PYTHON_PROPERTY + " and " + PYTHON_ENV + " are unset and");
        if (value.contains("/")) {
            Path p = Path.of(value).toAbsolutePath();
            if (Files.isRegularFile(p) && Files.isExecutable(p)) {
                return p;
            }
            throw new IllegalStateException("the Python interpreter was not found: " + from
                    + " is not an executable file");
        }
        String path = l.environment().apply("PATH");
        for (String dir : path == null ? new String[0] : path.split(File.pathSeparator)) {
            Path p = Path.of(dir.isEmpty() ? "." : dir, value).toAbsolutePath();
            if (Files.isRegularFile(p) && Files.isExecutable(p)) {
                return p;
            }
        }
        throw new IllegalStateException("the Python interpreter was not found: " + from + " no " + value
                + " is on PATH (" + path + "); name one with -D" + PYTHON_PROPERTY + "=/path/to/python3");
    }

    /**
     * The Python client, ready to run: the interpreter as it names itself ({@code sys.executable}), the package
     * directory, and the environment its children get (PYTHONPATH with the package directory first).
     *
     * @param torchVersion {@code torch.__version__}, or null when torch was not asked for
     */
    record Python(Path interpreter, Path packageDir, String version, String torchVersion,
            Map<String, String> environment) {
        String describe() {
            return "Python " + version + " (" + interpreter + "), engram_host from " + packageDir
                    + (torchVersion == null ? "" : ", torch " + torchVersion);
        }

        /**
         * The package's sources copied under {@code dir} and compiled to bytecode there ({@code compileall}), and the
         * environment that imports them from there. An installed package comes compiled (pip compiles it), so a
         * shot should not compile it; and the source directory gets no {@code __pycache__} (nor needs to be
         * writable).
         */
        Python compiledCopy(Path dir) {
            Path to = dir.toAbsolutePath().normalize();
            Path from = packageDir.resolve("engram_host");
            try (Stream<Path> files = Files.walk(from)) {
                for (Path f : files.filter(f -> Files.isRegularFile(f) && f.toString().endsWith(".py")).toList()) {
                    Path target = to.resolve("engram_host").resolve(from.relativize(f).toString());
                    Files.createDirectories(target.getParent());
                    Files.copy(f, target, StandardCopyOption.COPY_ATTRIBUTES);
                }
            } catch (IOException e) {
                throw new UncheckedIOException("cannot copy the Python package " + from + " to " + to, e);
            }
            String path = environment.getOrDefault("PYTHONPATH", "");
            String rest = path.startsWith(packageDir.toString()) ? path.substring(packageDir.toString().length()) : "";
            Map<String, String> env = Map.of("PYTHONPATH", to + rest); // the copy in place of the package directory
            Ran r = PeerClients.run(List.of(interpreter.toString(), "-m", "compileall", "-q", to.resolve("engram_host")
                    .toString()), env, "compile engram_host");
            if (r.status() != 0) {
                throw new IllegalStateException("the Python interpreter " + interpreter + " could not compile its copy"
                        + " of engram_host (exit status " + r.status() + ")" + r.output());
            }
            return new Python(interpreter, to, version, torchVersion, env);
        }
    }

    /** {@link #python(boolean, Lookup)} with this JVM's settings. */
    static Python python(boolean torch) {
        return python(torch, Lookup.system());
    }

    /**
     * Finds the interpreter and the package, then runs the interpreter once with the children's environment to
     * check that it imports {@code engram_host} from that directory and, with {@code torch}, PyTorch.
     *
     * @throws IllegalStateException naming what is missing: the interpreter, the package, or torch
     */
    static Python python(boolean torch, Lookup l) {
        Path exe = pythonInterpreter(l);
        Path pkg = pythonPackage(l);
        Map<String, String> env = new LinkedHashMap<>();
        String inherited = l.environment().apply("PYTHONPATH");
        env.put("PYTHONPATH", pkg + (inherited == null || inherited.isBlank() ? "" : File.pathSeparator + inherited));
        Map<String, String> found = probe(exe, env, torch);
        String version = found.getOrDefault("version", "?");
        String who = exe + " (Python " + version + ")";
        if (found.containsKey("engram_host!")) {
            throw new IllegalStateException("the Python client's package cannot be imported: " + who
                    + " with PYTHONPATH=" + env.get("PYTHONPATH") + " fails `import engram_host`: "
                    + found.get("engram_host!"));
        }
        Path imported = Path.of(found.getOrDefault("engram_host", "?")).toAbsolutePath().normalize();
        if (!startsWithReal(imported, pkg)) {
            throw new IllegalStateException("the Python client's package: " + who + " imports engram_host from "
                    + imported + ", not from " + pkg);
        }
        if (torch && found.containsKey("torch!")) {
            throw new IllegalStateException("the Python client needs PyTorch (torch=true: every table becomes a"
                    + " tensor), but " + who + " fails `import torch`: " + found.get("torch!") + "; install it for that"
                    + " interpreter, name one that has it (-D" + PYTHON_PROPERTY + ", $" + PYTHON_ENV + "), or run"
                    + " with -p torch=false");
        }
        String exeSays = found.get("python");
        Path interpreter = exeSays == null || exeSays.isBlank() ? exe : Path.of(exeSays);
        return new Python(interpreter, pkg, version, torch ? found.get("torch") : null, Map.copyOf(env));
    }

    private static boolean startsWithReal(Path file, Path dir) {
        try {
            return file.toRealPath().startsWith(dir.toRealPath());
        } catch (IOException e) {
            return false;
        }
    }

    /** The probe's findings, one {@code key=value} (or {@code key!error}) line each. */
    private static final String PROBE = String.join("\n",
            "import sys",
            "def say(k, v): print(k + str(v).replace('\\n', ' '), flush=True)",
            "say('python=', sys.executable)",
            "say('version=', sys.version.split()[0])",
            "try:",
            "    import engram_host",
            "    say('engram_host=', engram_host.__file__)",
            "except BaseException as e:",
            "    say('engram_host!', type(e).__name__ + ': ' + str(e))",
            "if sys.argv[1:] == ['torch']:",
            "    try:",
            "        import torch",
            "        say('torch=', torch.__version__)",
            "    except BaseException as e:",
            "        say('torch!', type(e).__name__ + ': ' + str(e))",
            "say('probe=', 'done')");

    /** Runs the probe; its lines as a map ({@code key} or {@code key!} to the rest), or throws with its output. */
    private static Map<String, String> probe(Path exe, Map<String, String> env, boolean torch) {
        List<String> cmd = new ArrayList<>(List.of(exe.toString(), "-c", PROBE));
        if (torch) {
            cmd.add("torch");
        }
        Map<String, String> probeEnv = new LinkedHashMap<>(env);
        probeEnv.put("PYTHONDONTWRITEBYTECODE", "1"); // no __pycache__ in the source directory
        Ran r = run(cmd, probeEnv, "import engram_host" + (torch ? ", torch" : ""));
        Map<String, String> found = new LinkedHashMap<>();
        for (String line : r.stdout().split("\n")) {
            int eq = line.indexOf('=');
            int bang = line.indexOf('!');
            int at = eq < 0 ? bang : bang < 0 ? eq : Math.min(eq, bang);
            if (at > 0) {
                found.put(line.substring(0, at) + (at == bang ? "!" : ""), line.substring(at + 1));
            }
        }
        if (r.status() != 0 || !"done".equals(found.get("probe"))) {
            throw new IllegalStateException("the Python interpreter " + exe + " failed its check (exit status "
                    + r.status() + "): " + String.join(" ", cmd.subList(0, 2)) + " <probe>" + r.output());
        }
        return found;
    }

    /** A finished Python command: its exit status, its stdout, and both streams' tails for a message. */
    record Ran(int status, String stdout, String output) {
    }

    /** Runs {@code cmd} with this JVM's environment plus {@code env}, killing it past {@link #PROBE_TIMEOUT_MILLIS}. */
    static Ran run(List<String> cmd, Map<String, String> env, String doing) {
        Path exe = Path.of(cmd.get(0));
        Path dir;
        try {
            dir = Files.createTempDirectory("engram-python-");
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create a directory for the Python interpreter's output", e);
        }
        try {
            Path out = dir.resolve("stdout");
            Path err = dir.resolve("stderr");
            ProcessBuilder pb = new ProcessBuilder(cmd)
                    .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                    .redirectOutput(out.toFile()).redirectError(err.toFile());
            pb.environment().putAll(env);
            Process p;
            try {
                p = pb.start();
            } catch (IOException e) {
                throw new IllegalStateException("the Python interpreter " + exe + " cannot be started: "
                        + e.getMessage(), e);
            }
            try {
                if (!p.waitFor(PROBE_TIMEOUT_MILLIS, TimeUnit.MILLISECONDS)) {
                    p.descendants().forEach(ProcessHandle::destroyForcibly);
                    p.destroyForcibly().waitFor();
                    throw new IllegalStateException("the Python interpreter " + exe + " did not " + doing + " within "
                            + PROBE_TIMEOUT_MILLIS + " ms and was killed" + output(out, err));
                }
            } catch (InterruptedException e) {
                p.destroyForcibly();
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while the Python interpreter " + exe + " was to "
                        + doing, e);
            }
            return new Ran(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), output(out, err));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read the Python interpreter's output", e);
        } finally {
            InProcessDaemon.deleteTree(dir);
        }
    }

    private static String output(Path out, Path err) {
        StringBuilder s = new StringBuilder();
        for (Path f : List.of(out, err)) {
            try {
                String text = Files.readString(f, StandardCharsets.UTF_8).strip();
                if (!text.isEmpty()) {
                    List<String> lines = List.of(text.split("\n"));
                    s.append("\n  ").append(f.getFileName()).append(":\n    ")
                            .append(String.join("\n    ", lines.subList(Math.max(0, lines.size() - 20), lines.size())));
                }
            } catch (IOException e) {
                s.append("\n  ").append(f.getFileName()).append(": (unreadable: ").append(e.getMessage()).append(')');
            }
        }
        return s.toString();
    }
}
