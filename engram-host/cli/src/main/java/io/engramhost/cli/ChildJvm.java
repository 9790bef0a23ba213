package io.engramhost.cli;

import io.engramhost.os.JvmFlags;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The command line that runs the CLI in a new JVM: same java, same classpath, the project's JVM
 * flags, and for {@code serve} the daemon's own (its bounded heap), as the launcher does.
 */
public final class ChildJvm {
    private ChildJvm() {
    }

    public static List<String> command(String... args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java"));
        cmd.addAll(JvmFlags.get());
        if (args.length > 0 && args[0].equals("serve")) {
            cmd.addAll(JvmFlags.daemon());
        }
        cmd.add("-cp");
        cmd.add(classPath());
        cmd.add(Main.class.getName());
        cmd.addAll(List.of(args));
        return cmd;
    }

    /**
     * This JVM's class path, for a child. The release's launcher names its jars through a directory fd
     * ({@code /proc/self/fd/87/...}, so that its AppCDS archive matches wherever it is unpacked: bin/engram-host),
     * which a child does not inherit: those entries become the real paths.
     */
    static String classPath() {
        String cp = System.getProperty("java.class.path");
        if (!cp.contains("/proc/self/fd/")) {
            return cp;
        }
        List<String> out = new ArrayList<>();
        for (String entry : cp.split(File.pathSeparator)) {
            try {
                out.add(entry.startsWith("/proc/self/fd/") ? Path.of(entry).toRealPath().toString() : entry);
            } catch (IOException e) {
                throw new UncheckedIOException("class path entry " + entry, e);
            }
        }
        return String.join(File.pathSeparator, out);
    }
}
