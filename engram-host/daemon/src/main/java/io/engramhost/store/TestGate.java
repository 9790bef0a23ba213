package io.engramhost.store;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * TEST ONLY: a point where a daemon holds while an environment variable of the form {@code STEP:PATH} names that
 * step, until PATH exists. Tests use it to change a checkpoint, or kill a daemon, at a known point; the daemon
 * says once on stderr that it is held. Nothing else should set these variables.
 */
public final class TestGate {
    private TestGate() {
    }

    /** True when {@code variable} names {@code step}. */
    public static boolean names(String variable, String step) {
        String g = System.getenv(variable);
        return g != null && g.startsWith(step + ":");
    }

    /** Holds while {@code variable} names {@code step} and its path does not exist; false if interrupted. */
    public static boolean hold(String variable, String step, String what) {
        if (!names(variable, step)) {
            return true;
        }
        String g = System.getenv(variable);
        Path p = Path.of(g.substring(step.length() + 1));
        if (Files.exists(p)) {
            return true;
        }
        System.err.println("engram-host: TEST ONLY (" + variable + "=" + g + "): " + what + " held at '" + step
                + "' until " + p + " exists");
        System.err.flush();
        while (!Files.exists(p)) {
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return true;
    }
}
