package io.engramhost.cli;

import io.engramhost.os.JvmFlags;
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
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(Main.class.getName());
        cmd.addAll(List.of(args));
        return cmd;
    }
}
