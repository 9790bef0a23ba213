package io.engramhost.cli;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.checkpoint.Selection;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.json.JsonReader;
import io.engramhost.protocol.Backend;
import io.engramhost.protocol.ReadyFile;
import io.engramhost.protocol.SocketPaths;
import io.engramhost.util.Bytes;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code demo}: the main job on an embedded default. Generates a model directory in the published layout, starts a
 * daemon process on it (which selects the Engram tables its config.json names), imports twice from fresh client
 * processes that expect the directory (an engine restarting), verifies every table's SHA-256
 * against the checkpoint file, prints the timings and stops the daemon.
 */
@Command(name = "demo", description = "Generate a checkpoint, serve it, import it twice from new processes, verify, stop.")
final class DemoCommand implements Callable<Integer> {
    @Option(names = "--rows", defaultValue = "500000", paramLabel = "N",
            description = "Rows per table (default: ${DEFAULT-VALUE}: about 250 MiB in all).")
    long rows;

    @Option(names = "--backend", defaultValue = "memfd", paramLabel = "NAME",
            converter = WireNameOptions.BackendConverter.class, completionCandidates = WireNameOptions.BackendNames.class,
            description = "One of ${COMPLETION-CANDIDATES} (default: ${DEFAULT-VALUE}).")
    Backend backend;

    @Option(names = "--keep", description = "Keep the temporary directory.")
    boolean keep;

    @Override
    public Integer call() throws Exception {
        Path dir = Files.createTempDirectory("engram-demo-");
        Path socket = dir.resolve("run/engram.sock");
        Process daemon = null;
        try {
            System.out.println("1. generating a model directory in DeepSeek-V4.1's published layout in " + dir);
            Path model = dir.resolve("model");
            CheckpointGenerator.writeModel(model, new CheckpointGenerator.Model(List.of(1, 14), rows, 256, 42, "", true,
                    false));
            Checkpoint whole = Checkpoint.open(List.of(model));
            Selection selection = Selection.of(whole, List.of());
            List<TensorInfo> served = selection.tensors();
            System.out.printf("   %d tensors, %s in %d files; serve selects %s%n", whole.tensors().size(),
                    Bytes.format(Checkpoint.totalBytes(whole.tensors())), whole.files().size(),
                    selection.description());

            System.out.println("2. starting a daemon process (backend " + backend + ")");
            daemon = new ProcessBuilder(ChildJvm.command("serve", "--checkpoint", model.toString(), "--backend", backend.wireName(),
                    "--socket", socket.toString(), "--numa", "auto"))
                    .redirectErrorStream(true).redirectOutput(dir.resolve("daemon.log").toFile()).start();
            awaitReady(daemon, socket, dir.resolve("daemon.log"));
            String status = EngramClient.status(socket, ClientOptions.defaults());
            Map<?, ?> s = (Map<?, ?>) JsonReader.parse(status);
            System.out.println("   ready: pid " + s.get("pid") + ", " + describeLoad(s));

            List<Map<?, ?>> imports = new ArrayList<>();
            for (int i = 1; i <= 2; i++) {
                System.out.println("3." + i + " engine (re)start: a fresh process imports every table");
                Map<?, ?> r = importInChild(socket, dir, model);
                imports.add(r);
                Map<?, ?> t = (Map<?, ?>) r.get("timings");
                System.out.printf("   imported %d tables in %.1f ms%n", ((List<?>) r.get("tables")).size(),
                        num(t.get("total_ms")));
            }

            System.out.println("4. verifying each table's SHA-256 against the checkpoint file");
            for (TensorInfo t : served) {
                String expected = sha256(t);
                for (Map<?, ?> r : imports) {
                    String got = sha256Of(r, t.name());
                    if (!expected.equals(got)) {
                        throw new IllegalStateException("table " + t.name() + ": imported SHA-256 " + got
                                + " differs from the checkpoint's " + expected);
                    }
                }
                System.out.printf("   %-40s %s ok%n", t.name(), expected.substring(0, 16));
            }

            System.out.println("5. timings");
            Map<?, ?> load = (Map<?, ?>) s.get("load");
            System.out.printf("   %-28s %10s%n", "daemon: read checkpoint", seconds(load.get("read_s")));
            System.out.printf("   %-28s %10s%n", "daemon: ready after", seconds(s.get("ready_s")));
            for (int i = 0; i < imports.size(); i++) {
                Map<?, ?> t = (Map<?, ?>) imports.get(i).get("timings");
                System.out.printf("   %-28s %10s  (native bindings %.1f ms, connect %.1f ms, manifest and fds %.1f ms,"
                        + " map %.2f ms)%n", "client " + (i + 1) + ": import", String.format("%.1f ms", num(t.get("total_ms"))),
                        num(t.get("native_init_ms")), num(t.get("handshake_ms")), num(t.get("manifest_ms")), num(t.get("map_ms")));
            }

            System.out.println("6. stopping the daemon");
            EngramClient.stop(socket, ClientOptions.defaults());
            if (!daemon.waitFor(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("the daemon did not exit within 30 s of stop");
            }
            if (daemon.exitValue() != 0) {
                throw new IllegalStateException("the daemon exited with " + daemon.exitValue() + "; see its log");
            }
            if (Files.exists(socket) || Files.exists(SocketPaths.readyFile(socket))) {
                throw new IllegalStateException("the daemon left its socket or ready file behind");
            }
            System.out.println("demo ok: " + served.size() + " tables served, imported twice, verified, stopped");
            return 0;
        } finally {
            if (daemon != null && daemon.isAlive()) {
                daemon.destroyForcibly();
            }
            if (!keep) {
                deleteTree(dir);
            }
        }
    }

    /** STATUS's load and placement in words: "read 256 MiB in 0.05 s (4.9 GiB/s), pages on node 0: 12892". */
    private static String describeLoad(Map<?, ?> status) {
        StringBuilder b = new StringBuilder();
        if (status.get("load") instanceof Map<?, ?> load) {
            b.append(String.format("read and digested in %.2f s (%.2f GiB/s)", num(load.get("read_s")),
                    num(load.get("read_gib_s"))));
        }
        if (status.get("placement") instanceof Map<?, ?> placement) {
            List<String> nodes = new ArrayList<>();
            placement.forEach((k, v) -> {
                String key = String.valueOf(k);
                if (key.matches("node\\d+_pages")) {
                    nodes.add("node " + key.substring(4, key.length() - 6) + ": " + v);
                }
            });
            if (!nodes.isEmpty()) {
                b.append(b.length() > 0 ? ", " : "").append("pages on ").append(String.join(", ", nodes));
            }
        }
        return b.toString();
    }

    private static void awaitReady(Process daemon, Path socket, Path log) throws Exception {
        Path ready = SocketPaths.readyFile(socket);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!String.valueOf(daemon.pid()).equals(ReadyFile.read(ready).get("pid"))) {
            if (!daemon.isAlive()) {
                throw new IllegalStateException("the daemon exited with " + daemon.exitValue() + ": "
                        + Files.readString(log, StandardCharsets.UTF_8).strip());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the daemon was not ready within 120 s");
            }
            Thread.sleep(50);
        }
    }

    private static Map<?, ?> importInChild(Path socket, Path dir, Path model) throws Exception {
        Process p = new ProcessBuilder(ChildJvm.command("import", "--socket", socket.toString(), "--expect-checkpoint",
                model.toString(), "--digest", "sha256", "--json")).redirectError(dir.resolve("client.log").toFile()).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException("the client process failed: "
                    + Files.readString(dir.resolve("client.log"), StandardCharsets.UTF_8).strip());
        }
        return (Map<?, ?>) JsonReader.parse(out.strip());
    }

    private static String sha256Of(Map<?, ?> importResult, String name) {
        for (Object o : (List<?>) importResult.get("tables")) {
            Map<?, ?> t = (Map<?, ?>) o;
            if (name.equals(t.get("name"))) {
                return (String) t.get("sha256");
            }
        }
        throw new IllegalStateException("table " + name + " was not imported");
    }

    /** SHA-256 of a tensor's bytes, read from the checkpoint file. */
    static String sha256(TensorInfo t) throws Exception {
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        try (FileChannel ch = FileChannel.open(t.file(), StandardOpenOption.READ)) {
            ByteBuffer buf = ByteBuffer.allocate(1 << 20);
            long pos = t.offset();
            long end = t.offset() + t.length();
            while (pos < end) {
                buf.clear().limit((int) Math.min(buf.capacity(), end - pos));
                int n = ch.read(buf, pos);
                if (n < 0) {
                    throw new IOException("unexpected end of " + t.file());
                }
                md.update(buf.flip());
                pos += n;
            }
        }
        return HexFormat.of().formatHex(md.digest());
    }

    private static double num(Object o) {
        return ((Number) o).doubleValue();
    }

    private static String seconds(Object o) {
        return o == null ? "-" : String.format("%.3f s", num(o));
    }

    private static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
