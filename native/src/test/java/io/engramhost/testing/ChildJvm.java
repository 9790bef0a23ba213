package io.engramhost.testing;

import io.engramhost.os.JvmFlags;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Starts a separate JVM with this JVM's class path, the project's JVM flags and tmpdir. */
public final class ChildJvm {
    private ChildJvm() {
    }

    /**
     * The command line of a JVM that runs {@code main} with {@code args}: this JVM's java, the project's
     * flags, this JVM's tmpdir and test class path, then {@code jvmOptions}.
     */
    public static List<String> command(Class<?> main, List<String> jvmOptions, String... args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(JvmFlags.get());
        cmd.add("-Djava.io.tmpdir=" + System.getProperty("java.io.tmpdir"));
        cmd.addAll(jvmOptions);
        cmd.add("-cp");
        cmd.add(System.getProperty("surefire.test.class.path", System.getProperty("java.class.path")));
        cmd.add(main.getName());
        cmd.addAll(List.of(args));
        return cmd;
    }

    /** Starts {@link #command} of {@code main}; its stdout and stderr go to {@code log}. */
    public static Process start(Class<?> main, Path log, String... args) throws IOException {
        return new ProcessBuilder(command(main, List.of(), args)).redirectErrorStream(true).redirectOutput(log.toFile())
                .start();
    }
}
