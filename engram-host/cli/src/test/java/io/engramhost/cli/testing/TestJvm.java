package io.engramhost.cli.testing;

import io.engramhost.cli.ChildJvm;
import io.engramhost.cli.Main;
import java.util.ArrayList;
import java.util.List;

/**
 * TEST ONLY: the command line that runs the CLI in a new JVM as {@code bin/engram-host-test} does, with the test jar's
 * hooks ({@link TestMain}): {@link ChildJvm#command}'s JVM, flags and class path (the tests' own, which holds this
 * class), another main class, and C1 only.
 */
public final class TestJvm {
    private TestJvm() {
    }

    public static List<String> command(String... args) {
        List<String> cmd = new ArrayList<>(ChildJvm.command(args));
        cmd.set(cmd.indexOf(Main.class.getName()), TestMain.class.getName());
        // C1 only: these JVMs live seconds, on CI's two cores, where C2's compiling costs more than it saves (about
        // 10% of the cli module's test time); the release's launcher leaves the JIT as it is
        cmd.add(1, "-XX:TieredStopAtLevel=1");
        return cmd;
    }
}
