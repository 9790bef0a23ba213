package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.ContentCheck;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.Expectation;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A client process for the takeover tests: holds {@code leases} leases (each checked against the checkpoint's
 * digests, each with an onDaemonGone callback) and runs {@code importers} threads that import, check every
 * table's digest and close, in a loop. Prints {@code leases N} once they are held and {@code imports N} after
 * each 10 imports; on a line {@code stop} on stdin it stops and prints one JSON line: the imports done, every
 * failure, every onDaemonGone that fired, and how many leases are still open. A fifth argument {@code gpu} gives
 * every import GPU views on GPU 0 (and a CPU view, which the digests read).
 */
public final class TakeoverLoad {
    private TakeoverLoad() {
    }

    public static void main(String[] args) throws Exception {
        Path socket = Path.of(args[0]);
        Path checkpoint = Path.of(args[1]);
        int leases = Integer.parseInt(args[2]);
        int importers = Integer.parseInt(args[3]);
        ClientOptions options = args.length > 4 && args[4].equals("gpu") ? ClientOptions.defaults().withGpu(0, true)
                : ClientOptions.defaults();
        ContentCheck.Trusted trusted;
        try (ImportedTables first = EngramClient.connect(socket, Expectation.any(), options)) {
            trusted = ContentCheck.fromCheckpoint(List.of(checkpoint), first.tables().keySet(), 1);
        }
        List<String> failures = Collections.synchronizedList(new ArrayList<>());
        List<String> gone = Collections.synchronizedList(new ArrayList<>());
        List<ImportedTables> held = new ArrayList<>();
        for (int i = 0; i < leases; i++) {
            ImportedTables t = EngramClient.connect(socket, Expectation.any(), options);
            ContentCheck.verify(t, trusted, 1);
            int n = i;
            t.onDaemonGone(reason -> gone.add("lease " + n + ": " + reason));
            held.add(t);
        }
        System.out.println("leases " + held.size());
        System.out.flush();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicInteger imports = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < importers; i++) {
            Thread th = new Thread(() -> {
                while (!stop.get()) {
                    try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), options)) {
                        ContentCheck.verify(t, trusted, 1);
                        if (imports.incrementAndGet() % 10 == 0) {
                            System.out.println("imports " + imports.get());
                            System.out.flush();
                        }
                    } catch (RuntimeException e) {
                        failures.add(String.valueOf(e.getMessage()));
                    }
                }
            });
            th.start();
            threads.add(th);
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.equals("stop")) {
            // wait for the test's word
        }
        stop.set(true);
        for (Thread th : threads) {
            th.join();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("imports", imports.get());
        out.put("failures", new ArrayList<>(failures));
        out.put("gone", new ArrayList<>(gone));
        out.put("open", held.stream().filter(t -> t.daemonGoneReason() == null).count());
        System.out.println(JsonWriter.write(out));
        System.out.flush();
        held.forEach(ImportedTables::close);
    }
}
