package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.json.JsonReader;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** {@code status}: what a daemon is doing. */
@Command(name = "status", description = "Show a daemon's state, tables and leases.")
final class StatusCommand implements Callable<Integer> {
    @Mixin
    SocketOptions socket;

    @Mixin
    DaemonTrustOptions trust;

    @Option(names = "--json", description = "Print the daemon's status document as JSON.")
    boolean json;

    @Override
    public Integer call() {
        String doc = EngramClient.status(socket.resolve(),
                trust.apply(ClientOptions.defaults().withName("engram-host status")));
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
            System.out.printf("load       create %.3f s, read %.3f s (%.2f GiB/s), digest %.3f s, verify+seal %.3f s;"
                    + " ready after %.3f s%n", num(l.get("create_s")), num(l.get("read_s")), num(l.get("read_gib_s")),
                    num(l.get("digest_s")), num(l.get("verify_seal_s")), num(s.get("ready_s")));
        }
        if (s.containsKey("device_tensors")) {
            System.out.printf("gpu        %s%n", s.get("device_tensors"));
        }
        if (s.containsKey("placement")) {
            System.out.printf("placement  %s%n", s.get("placement"));
        }
        List<?> leases = (List<?>) s.get("leases");
        System.out.printf("leases     %d%n", leases.size());
        for (Object o : leases) {
            Map<?, ?> l = (Map<?, ?>) o;
            System.out.printf("  #%s pid %s uid %s since %s%n", l.get("id"), l.get("pid"), l.get("uid"), l.get("since"));
        }
        return 0;
    }

    private static double num(Object o) {
        return o instanceof Number n ? n.doubleValue() : Double.NaN;
    }
}
