package io.engramhost.cli.testing;

import io.engramhost.cli.ChildJvm;
import io.engramhost.cli.Main;
import java.util.ArrayList;
import java.util.List;

/**
 * TEST ONLY: the command line that runs the CLI in a new JVM as {@code bin/engram-host-test} does, with the test jar's
 * hooks ({@link TestMain}): {@link ChildJvm#command}'s JVM, flags and class path (the tests' own, which holds this
 * class), another main class.
 */
public final class TestJvm {
    private TestJvm() {
    }

    public static List<String> command(String... args) {
        List<String> cmd = new ArrayList<>(ChildJvm.command(args));
        cmd.set(cmd.indexOf(Main.class.getName()), TestMain.class.getName());
        return cmd;
    }
}
