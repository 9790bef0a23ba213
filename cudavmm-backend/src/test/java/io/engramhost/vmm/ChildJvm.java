package io.engramhost.vmm;

import io.engramhost.os.JvmFlags;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Starts a separate JVM with this JVM's class path, the project's JVM flags and tmpdir. */
final class ChildJvm {
    private ChildJvm() {
    }

    static Process start(Class<?> main, Path log, String... args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(JvmFlags.get());
        cmd.add("-Djava.io.tmpdir=" + System.getProperty("java.io.tmpdir"));
        cmd.add("-cp");
        cmd.add(System.getProperty("surefire.test.class.path", System.getProperty("java.class.path")));
        cmd.add(main.getName());
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    }
}
