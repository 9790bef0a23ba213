package io.engramhost.bench;

import java.nio.file.Files;
import java.nio.file.Path;

/** Where the C client of the wire protocol ({@code native/c/engram_attach.c}) is, for the C baselines. */
final class NativeClients {
    static final String ENV = "ENGRAM_ATTACH";

    private NativeClients() {
    }

    /**
     * {@code $ENGRAM_ATTACH} when set (the GPU bundle sets it), else {@code native/build/engram-attach}
     * in the working directory or one above it.
     *
     * @throws IllegalStateException naming both places and how to build it, when neither has it
     */
    static Path engramAttach() {
        String env = System.getenv(ENV);
        if (env != null && !env.isBlank()) {
            Path p = Path.of(env);
            if (!Files.isExecutable(p)) {
                throw new IllegalStateException(ENV + "=" + env + " is not an executable file");
            }
            return p;
        }
        Path here = Path.of("").toAbsolutePath();
        for (Path d = here; d != null; d = d.getParent()) {
            Path p = d.resolve("native/build/engram-attach");
            if (Files.isExecutable(p)) {
                return p;
            }
        }
        throw new IllegalStateException("the C client engram-attach was not found: " + ENV + " is unset and no "
                + "native/build/engram-attach is in " + here + " or above it; build it with `make -C native engram-attach`");
    }
}
