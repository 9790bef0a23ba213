package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.EngramClient;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * What an engine's JVM needs to use the client: only the client's runtime class path (what Maven gives a project
 * that depends on engram-client, so no Chronicle Bytes, no SLF4J, no daemon, no Picocli), and no flag at all: no
 * {@code -Djnr.ffi.x86asm.enabled=false} (NativeBindingsTest), no {@code --add-opens}. A plain {@code java} started so,
 * running {@link PlainClasspathClient} (its one class file copied beside the class path), imports every table from
 * a real daemon process, checks each table's bytes against the checkpoint's, hears in one line that
 * {@code openBytes} needs Chronicle Bytes, and exits 0 with nothing on stderr.
 */
@Timeout(180)
class PlainClasspathClientTest {
    /** The client's runtime class path, written at build time (the cli pom, execution client-classpath). */
    private static final Path CLIENT_CLASSPATH = Path.of("target/client-classpath.txt");

    @Test
    void shouldImportAndCheckEveryTableWithTheClientsRuntimeClassPathAndNoFlag(@TempDir Path dir) throws Exception {
        List<String> classPath = List.of(Files.readString(CLIENT_CLASSPATH).strip().split(File.pathSeparator));
        List<String> jars = classPath.stream().map(e -> Path.of(e).getFileName().toString()).toList();
        assertTrue(jars.stream().anyMatch(j -> j.startsWith("engram-client-")), "the client is on it: " + jars);
        for (String absent : List.of("chronicle-", "slf4j-", "engram-daemon-", "engram-cli-", "picocli-", "prometheus-",
                "netty-")) {
            assertFalse(jars.stream().anyMatch(j -> j.startsWith(absent)), absent + "* is not: " + jars);
        }
        Path index = CheckpointGenerator.writeSharded(dir.resolve("ckpt"),
                new CheckpointGenerator.Spec(List.of(1, 14), 1000, 64, 3));
        List<String> expected = new ArrayList<>();
        for (TensorInfo t : Checkpoint.open(List.of(index)).tensors()) {
            expected.add(t.name() + "=" + DemoCommand.sha256(t));
        }
        Path socket = dir.resolve("run/p.sock");
        try (DaemonProcess d = DaemonProcess.start(socket, dir.resolve("d.log"), "--checkpoint", index.toString())
                .awaitReady()) {
            List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-cp",
                    String.join(File.pathSeparator, classPath) + File.pathSeparator + engineClasses(dir.resolve("engine")),
                    PlainClasspathClient.class.getName(), socket.toString(), index.toString()));
            cmd.addAll(expected);
            Process p = new ProcessBuilder(cmd).start();
            CompletableFuture<String> out = CompletableFuture.supplyAsync(() -> CliRun.read(p.getInputStream()));
            CompletableFuture<String> err = CompletableFuture.supplyAsync(() -> CliRun.read(p.getErrorStream()));
            if (!p.waitFor(120, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("the engine did not finish within 120 s: " + String.join(" ", cmd));
            }
            String report = "stdout:\n" + out.get() + "stderr:\n" + err.get() + "daemon:\n" + d.log();
            assertEquals(0, p.exitValue(), report);
            List<String> lines = new ArrayList<>(List.of("imported " + expected.size() + " tables"));
            expected.forEach(e -> lines.add(e.substring(0, e.indexOf('=')) + ": bytes match"));
            lines.add("openBytes: TableView.openBytes needs Chronicle Bytes, an optional dependency of engram-client:"
                    + " add net.openhft:chronicle-bytes to the engine's dependencies");
            lines.add("closed");
            assertEquals(lines, out.get().lines().toList(), report);
            assertEquals(EngramClient.HEADERS_ONLY + "\n", err.get(), "no warning but the headers-only notice (the"
                    + " checkpoint has no digest record): " + report);
        }
    }

    /** A directory holding PlainClasspathClient's class file alone, copied from the test classes. */
    private static Path engineClasses(Path dir) throws Exception {
        String file = PlainClasspathClient.class.getName().replace('.', '/') + ".class";
        Path from = Path.of(PlainClasspathClient.class.getProtectionDomain().getCodeSource().getLocation().toURI())
                .resolve(file);
        Path to = dir.resolve(file);
        Files.createDirectories(to.getParent());
        Files.copy(from, to);
        return dir;
    }
}
