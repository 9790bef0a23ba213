package io.engramhost.cli;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/** One CLI command run in a new JVM: exit code, stdout, stderr. */
record CliRun(int exit, String out, String err) {
    static CliRun of(String... args) throws Exception {
        Process p = new ProcessBuilder(ChildJvm.command(args)).start();
        var outF = java.util.concurrent.CompletableFuture.supplyAsync(() -> read(p.getInputStream()));
        var errF = java.util.concurrent.CompletableFuture.supplyAsync(() -> read(p.getErrorStream()));
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("engram-host " + String.join(" ", args) + " did not finish within 120 s");
        }
        return new CliRun(p.exitValue(), outF.get(), errF.get());
    }

    /** All of {@code in}, as UTF-8 (a child's stdout or stderr). */
    static String read(java.io.InputStream in) {
        try {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
