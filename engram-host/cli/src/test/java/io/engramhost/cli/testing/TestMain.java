package io.engramhost.cli.testing;

import io.engramhost.cli.Main;

/**
 * TEST ONLY: the CLI with the test jar's hooks ({@link EnvGateHooks}), as {@code bin/engram-host-test} runs it. Built
 * into the cli module's test jar, which the release tarball does not hold.
 */
public final class TestMain {
    private TestMain() {
    }

    public static void main(String[] args) {
        System.exit(Main.launch(new EnvGateHooks(System.getenv()), args));
    }
}
