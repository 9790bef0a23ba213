package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.json.JsonReader;
import io.engramhost.util.Bytes;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;

/**
 * {@code status}: what a daemon is doing. With {@code --ready}, a probe: one line, and exit 0 only when a
 * daemon answers and is ready; 1 when it is loading, failed or stopping, or when none answers.
 */
@Command(name = "status", description = "Show a daemon's state, tables and leases.")
final class StatusCommand implements Callable<Integer> {
    /** The first word of {@code --ready}'s line when the daemon is ready. */
    static final String READY = "ready";
    static final String NOT_READY = "not ready";

    @Mixin
    SocketOptions socket;

    @Mixin
    DaemonTrustOptions trust;

    @Option(names = "--json", description = "Print the daemon's status document as JSON.")
    boolean json;

    @Option(names = "--ready", description = "For probes: print one line and exit 0 only when the daemon answers and"
            + " is ready; 1 when it is loading, failed or stopping, or when no daemon answers.")
    boolean ready;

    @Option(names = "--timeout-ms", defaultValue = "10000", paramLabel = "MS",
            description = "Longest wait for each answer of the daemon (default: ${DEFAULT-VALUE}).")
    int timeoutMillis;

    @Override
    public Integer call() {
        if (timeoutMillis <= 0) {
            throw new ParameterException(new CommandLine(this),
                    "--timeout-ms must be positive, was " + timeoutMillis);
        }
        ClientOptions d = trust.apply(ClientOptions.defaults().withName("engram-host status"));
        ClientOptions options = new ClientOptions(timeoutMillis, d.notReadyWaitMillis(), d.populate(), d.clientName(),
                d.device(), d.gpuView(), d.cpuView(), d.daemonUids(), d.notices(), d.futureWriteSeal());
        if (ready) {
            return probe(options);
        }
        String doc = EngramClient.status(socket.resolveForClient(), options);
        if (json) {
            System.out.println(doc);
            return 0;
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> s = (Map<String, Object>) JsonReader.parse(doc);
        System.out.printf("state      %s%n", s.get("state"));
        System.out.printf("daemon     pid %s, version %s, backend %s, instance %s%n", s.get("pid"), s.get("version"),
                s.get("backend"), s.get("instance"));
        System.out.printf("socket     %s%n", s.get("socket"));
        System.out.printf("uptime     %.1f s%n", ((Number) s.get("uptime_s")).doubleValue());
        @SuppressWarnings("unchecked")
        Map<String, Object> p = (Map<String, Object>) s.get("progress");
        System.out.printf("progress   %s: %s of %s bytes%n", p.get("phase"), p.get("bytes_done"), p.get("bytes_total"));
        if (s.containsKey("error")) {
            System.out.printf("error      %s%n", s.get("error"));
        }
        if (s.containsKey("fingerprint")) {
            System.out.printf("fingerprint %s%n", s.get("fingerprint"));
            System.out.printf("tables     %d (%s bytes in %s regions)%n", ((List<?>) s.get("tables")).size(), s.get("bytes"),
                    s.get("regions"));
            for (Object o : (List<?>) s.get("tables")) {
                Map<?, ?> t = (Map<?, ?>) o;
                System.out.printf("  %-48s %-8s %-16s %12s B  %s numa=%s%s%n", t.get("name"), t.get("dtype"), t.get("shape"),
                        t.get("bytes"), t.get("backend"), t.get("numa_node"),
                        ((Number) t.get("device")).intValue() >= 0 ? " gpu=" + t.get("device") : "");
            }
        }
        if (s.containsKey("load")) {
            Map<?, ?> l = (Map<?, ?>) s.get("load");
            System.out.printf("load       create %.3f s (%.2f GiB/s), read+digest %.3f s (%.2f GiB/s, %s B O_DIRECT),"
                    + " verify+seal %.3f s; ready after %.3f s (%.3f s from the process's start, %.2f GiB/s)%n",
                    num(l.get("create_s")), num(l.get("create_gib_s")), num(l.get("read_s")), num(l.get("read_gib_s")),
                    l.get("read_direct_bytes"), num(l.get("verify_seal_s")), num(s.get("ready_s")),
                    num(s.get("process_ready_s")), num(s.get("ready_gib_s")));
        }
        if (s.get("origin") instanceof Map<?, ?> o) {
            System.out.printf("origin     %s%n", origin(o));
        }
        if (s.containsKey("device_tensors")) {
            System.out.printf("gpu        %s%n", s.get("device_tensors"));
        }
        if (s.containsKey("placement")) {
            System.out.printf("placement  %s%n", s.get("placement"));
        }
        if (s.containsKey("memory_check")) {
            System.out.printf("memory     %s%n", s.get("memory_check"));
        }
        List<?> leases = (List<?>) s.get("leases");
        System.out.printf("leases     %d%n", leases.size());
        for (Object o : leases) {
            Map<?, ?> l = (Map<?, ?>) o;
            System.out.printf("  #%s pid %s uid %s since %s%n", l.get("id"), l.get("pid"), l.get("uid"), l.get("since"));
        }
        return 0;
    }

    /** {@code --ready}: one line on stdout; 0 when ready, 1 otherwise (whatever went wrong). */
    private int probe(ClientOptions options) {
        Path path;
        String doc;
        try {
            path = socket.resolveForClient();
            if (Files.notExists(path, LinkOption.NOFOLLOW_LINKS)) {
                // answered without starting the client; a path this uid may not reach (EACCES) is neither, and the
                // client's connect then says which directory or socket shuts it out
                System.out.println(NOT_READY + ": no daemon: " + path + " does not exist");
                return 1;
            }
            doc = EngramClient.status(path, options);
        } catch (RuntimeException e) {
            System.out.println(NOT_READY + ": " + Main.oneLine(e));
            return 1;
        }
        Map<?, ?> s = (Map<?, ?>) JsonReader.parse(doc);
        Object state = s.get("state");
        if (READY.equals(state)) {
            int tables = s.get("tables") instanceof List<?> l ? l.size() : 0;
            System.out.printf("%s: pid %s, %d tables, fingerprint %s, socket %s%n", READY, s.get("pid"), tables,
                    s.get("fingerprint"), path);
            return 0;
        }
        Map<?, ?> p = (Map<?, ?>) s.get("progress");
        String detail = s.containsKey("error") ? ": " + s.get("error")
                : p != null ? " (" + p.get("phase") + ": " + p.get("bytes_done") + " of " + p.get("bytes_total")
                        + " bytes)" : "";
        System.out.printf("%s: daemon pid %s is %s%s%n", NOT_READY, s.get("pid"), state, detail);
        return 1;
    }

    /**
     * STATUS's {@code origin} in words: how the tables came (read, seeded from which peers, taken over from which
     * pid, from systemd's fd store) and what was read from the checkpoint.
     */
    static String origin(Map<?, ?> o) {
        long read = o.get("checkpoint_bytes_read") instanceof Number n ? n.longValue() : 0;
        String readText = Bytes.format(read) + " read from the checkpoint";
        Object how = o.get("how");
        String from = o.get("from_pid") instanceof Number n ? " pid " + n : "";
        String handover = o.get("handover_ms") instanceof Number n ? " in " + n + " ms" : "";
        String text = switch (String.valueOf(how)) {
            case "load" -> "loaded from the checkpoint (" + Bytes.format(read) + " read)";
            case "seed" -> "seeded";
            case "takeover" -> "taken over from" + (from.isEmpty() ? " its predecessor" : from) + handover + ", nothing read";
            case "takeover-orphaned" -> "taken over from a predecessor that died before its commit" + from + handover
                    + ", nothing read";
            case "fd-store" -> "restarted from systemd's fd store" + (o.get("stored_by") != null ? " (stored by "
                    + o.get("stored_by") + ")" : "") + handover + ", nothing read";
            default -> String.valueOf(how);
        };
        if (o.get("seeded") instanceof Map<?, ?> seeded) {
            StringBuilder b = new StringBuilder("seed".equals(how) ? "seeded:" : text + "; seeding gave");
            long bytes = seeded.get("bytes") instanceof Number n ? n.longValue() : 0;
            b.append(' ').append(Bytes.format(bytes)).append(" from ");
            List<?> sources = seeded.get("sources") instanceof List<?> l ? l : List.of();
            if (sources.isEmpty()) {
                b.append("no peer");
            }
            for (int i = 0; i < sources.size(); i++) {
                Map<?, ?> src = (Map<?, ?>) sources.get(i);
                b.append(i == 0 ? "" : ", ").append(src.get("peer")).append(" (")
                        .append(Bytes.format(src.get("bytes") instanceof Number n ? n.longValue() : 0)).append(", ")
                        .append(src.get("gib_s")).append(" GiB/s)");
            }
            b.append(" in ").append(seeded.get("seconds")).append(" s, ").append(seeded.get("peers_refused"))
                    .append(" refused");
            if ("seed".equals(how)) {
                b.append("; ").append(readText);
            }
            return b.toString();
        }
        return text;
    }

    private static double num(Object o) {
        return o instanceof Number n ? n.doubleValue() : Double.NaN;
    }
}
