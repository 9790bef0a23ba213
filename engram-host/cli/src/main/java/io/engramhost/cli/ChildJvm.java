package io.engramhost.cli;

import io.engramhost.os.JvmFlags;
import java.util.ArrayList;
import java.util.List;

/** The command line that runs the CLI in a new JVM: same java, same classpath, the project's JVM flags. */
public final class ChildJvm {
    private ChildJvm() {
    }

    public static List<String> command(String... args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java"));
        cmd.addAll(JvmFlags.get());
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(Main.class.getName());
        cmd.addAll(List.of(args));
        return cmd;
    }
}
