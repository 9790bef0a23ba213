package io.engramhost.bench;

import io.engramhost.json.JsonWriter;
import io.engramhost.util.BuildInfo;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** What a results file was measured on and with: machine, JVM, project version and commit, the comparisons. */
final class RunMetadata {
    private RunMetadata() {
    }

    static Map<String, Object> collect(Suite suite, List<String> args, Path results) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("started", Instant.now().truncatedTo(ChronoUnit.SECONDS).toString());
        m.put("suite", suite.lowerName());
        m.put("results", results.getFileName().toString());
        m.put("args", List.copyOf(args));
        m.put("hostname", hostname());
        m.put("machine", command("uname", "-a"));
        m.put("cpu_model", cpuModel());
        m.put("cores", Runtime.getRuntime().availableProcessors());
        m.put("memory_bytes", memTotalBytes());
        m.put("java_version", System.getProperty("java.version"));
        m.put("java_vm", System.getProperty("java.vm.name") + " " + System.getProperty("java.vm.version") + " ("
                + System.getProperty("java.vm.vendor") + ")");
        m.put("project_version", BuildInfo.version());
        m.put("git_commit", gitCommit());
        m.put("jvm_flags", BenchProperties.forkJvmFlags());
        m.put("host_jvm_args", ManagementFactory.getRuntimeMXBean().getInputArguments());
        m.put("comparisons", Comparisons.toJson());
        return m;
    }

    static void write(Path file, Map<String, Object> metadata) {
        try {
            Files.createDirectories(file.toAbsolutePath().getParent());
            Files.writeString(file, JsonWriter.write(metadata) + "\n", StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write run metadata to " + file, e);
        }
    }

    /** ENGRAM_GIT_COMMIT if set (a copied tree has no .git), else git rev-parse in the working directory. */
    static String gitCommit() {
        String env = System.getenv("ENGRAM_GIT_COMMIT");
        if (env != null && !env.isBlank()) {
            return env.trim();
        }
        String head = command("git", "rev-parse", "HEAD");
        if (head == null) {
            return null;
        }
        String status = command("git", "status", "--porcelain", "--untracked-files=no");
        return status == null || status.isEmpty() ? head : head + "-dirty";
    }

    private static String hostname() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            String h = command("hostname");
            return h == null ? "unknown" : h;
        }
    }

    private static String cpuModel() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                if (line.startsWith("model name")) {
                    return line.substring(line.indexOf(':') + 1).trim();
                }
            }
        } catch (IOException e) {
            return null;
        }
        return null;
    }

    private static Long memTotalBytes() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
                if (line.startsWith("MemTotal:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
        } catch (IOException | NumberFormatException e) {
            return null;
        }
        return null;
    }

    /** The trimmed stdout of a short command, or null when it fails or is missing. */
    static String command(String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(false).redirectError(ProcessBuilder.Redirect.DISCARD)
                    .start();
            byte[] out = p.getInputStream().readAllBytes();
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return null;
            }
            return p.exitValue() == 0 ? new String(out, StandardCharsets.UTF_8).trim() : null;
        } catch (IOException e) {
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }
}
