package io.engramhost.bench;

import com.kenai.jffi.internal.StubLoader;
import io.engramhost.os.JvmFlags;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;

/**
 * How {@link RestartBench} starts its Java client the way the release's launcher ({@code bin/engram-host}) starts
 * the installed CLI: the project's JVM flags ({@code jvm.options}), jffi's stub library loaded from a directory
 * (the launcher's {@code -Djffi.boot.library.path=app/jni}) and, for {@code javaClient}, a static AppCDS archive of
 * the classes the client's command loads, made the way {@code scripts/release/dist.sh} makes the release's: the command runs
 * once with {@code -XX:DumpLoadedClassList}, {@code -Xshare:dump} writes the archive from that list, and a run of
 * {@code --version} with {@code -Xshare:on} checks that it maps; the shots then run with it and {@code -Xshare:auto},
 * as the launcher does. All of it happens before the first shot (not timed).
 *
 * <p>What differs from the release: the JVM is this one's (in the GPU bundle, its jlink runtime), the class path this
 * one's (benchmarks.jar; a directory on it, as in the tests, is packed into a jar first: CDS archives classes from
 * jars only), and the class list is that of this one command on this machine (the release's is recorded at build
 * time from several commands, on a machine that usually has no GPU).
 */
final class JavaClientStart {
    static final String MAIN = "io.engramhost.cli.Main";
    /** How long each setup step (the class-list run, the dump, the check) may take. */
    static final long STEP_TIMEOUT_MILLIS = 300_000;

    private final Path dir;
    private final String java;
    private final List<String> flags;
    private final String classPath;

    private JavaClientStart(Path dir, String java, List<String> flags, String classPath) {
        this.dir = dir;
        this.java = java;
        this.flags = flags;
        this.classPath = classPath;
    }

    /**
     * Readies {@code dir}: jffi's stub library unpacked under {@code dir/jni}, and the class path as jars. The
     * flags are the project's, this JVM's {@code java.io.tmpdir} and jffi's boot path.
     */
    static JavaClientStart in(Path dir) {
        try {
            Files.createDirectories(dir);
            List<String> flags = new ArrayList<>(JvmFlags.get());
            flags.add("-Djava.io.tmpdir=" + System.getProperty("java.io.tmpdir"));
            flags.add("-Djffi.boot.library.path=" + unpackJffiStub(dir.resolve("jni")));
            return new JavaClientStart(dir, Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    List.copyOf(flags), jarClassPath(dir.resolve("classpath")));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot ready the Java client's start in " + dir + ": " + e.getMessage(), e);
        }
    }

    /** The client's command without an archive: the launcher's with {@code ENGRAM_HOST_CDS=0}. */
    List<String> command(List<String> args) {
        return command(List.of(), args);
    }

    /**
     * The client's command with an AppCDS archive of the classes {@code args} loads, which this makes first: a run
     * of the command that records its class list (it must exit 0), the dump, and a check that the archive maps.
     */
    List<String> commandWithAppCds(List<String> args) {
        Path list = dir.resolve("client.classlist");
        Path archive = dir.resolve("client.jsa");
        step("the class-list run of the Java client", command(List.of("-XX:DumpLoadedClassList=" + list), args),
                "classlist");
        List<String> dump = new ArrayList<>(List.of(java, "-Xshare:dump", "-XX:SharedClassListFile=" + list,
                "-XX:SharedArchiveFile=" + archive));
        dump.addAll(flags);
        dump.addAll(List.of("-cp", classPath));
        step("the AppCDS dump", dump, "dump");
        step("the AppCDS check (-Xshare:on)", command(List.of("-XX:SharedArchiveFile=" + archive, "-Xshare:on"),
                List.of("--version")), "check");
        return command(List.of("-XX:SharedArchiveFile=" + archive, "-Xshare:auto"), args);
    }

    private List<String> command(List<String> extraFlags, List<String> args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(java);
        cmd.addAll(flags);
        cmd.addAll(extraFlags);
        cmd.addAll(List.of("-cp", classPath, MAIN));
        cmd.addAll(args);
        return List.copyOf(cmd);
    }

    /** Runs one setup step to its end; it must exit 0 within {@link #STEP_TIMEOUT_MILLIS}. */
    private void step(String what, List<String> command, String name) {
        Path out = dir.resolve(name + ".out");
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(out.toFile())
                    .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
            if (!p.waitFor(STEP_TIMEOUT_MILLIS, TimeUnit.MILLISECONDS)) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly();
                p.waitFor();
                throw new IllegalStateException(what + " did not end within " + STEP_TIMEOUT_MILLIS + " ms: "
                        + String.join(" ", command));
            }
            if (p.exitValue() != 0) {
                throw new IllegalStateException(what + " exited with status " + p.exitValue() + ": "
                        + String.join(" ", command) + "\n  output tail:\n    " + tail(out).replace("\n", "\n    "));
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot run " + what + ": " + e.getMessage(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while " + what + " ran", e);
        }
    }

    private static String tail(Path file) throws IOException {
        List<String> lines = List.of(new String(Files.readAllBytes(file), StandardCharsets.UTF_8).strip().split("\n"));
        return String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
    }

    /** jffi's stub library for this platform, copied from the class path under {@code jni}; returns {@code jni}. */
    private static Path unpackJffiStub(Path jni) throws IOException {
        String resource = "jni/" + StubLoader.getPlatformName() + "/"
                + System.mapLibraryName("jffi-" + StubLoader.VERSION_MAJOR + "." + StubLoader.VERSION_MINOR);
        try (InputStream in = StubLoader.class.getClassLoader().getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("jffi's stub library " + resource + " is not on the class path (the jffi"
                        + " native jar is missing)");
            }
            Path target = jni.resolve(resource.substring("jni/".length()));
            Files.createDirectories(target.getParent());
            Files.copy(in, target);
        }
        return jni;
    }

    /** This JVM's class path, each directory on it packed into a jar under {@code out}. */
    private static String jarClassPath(Path out) throws IOException {
        List<String> entries = new ArrayList<>();
        int n = 0;
        for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
            Path p = Path.of(e).toAbsolutePath();
            if (Files.isDirectory(p)) {
                Files.createDirectories(out);
                Path jar = out.resolve((n++) + "-" + p.getFileName() + ".jar");
                packJar(p, jar);
                entries.add(jar.toString());
            } else if (!e.isEmpty()) {
                entries.add(p.toString());
            }
        }
        return String.join(File.pathSeparator, entries);
    }

    private static void packJar(Path root, Path jar) throws IOException {
        try (OutputStream o = Files.newOutputStream(jar); JarOutputStream j = new JarOutputStream(o);
                Stream<Path> files = Files.walk(root)) {
            for (Path f : (Iterable<Path>) files.filter(Files::isRegularFile).sorted()::iterator) {
                j.putNextEntry(new JarEntry(root.relativize(f).toString().replace(File.separatorChar, '/')));
                Files.copy(f, j);
                j.closeEntry();
            }
        }
    }
}
