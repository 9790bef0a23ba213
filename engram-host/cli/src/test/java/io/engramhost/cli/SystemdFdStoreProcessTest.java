package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.cli.testing.TestJvm;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.ContentCheck;
import io.engramhost.client.EngramClient;
import io.engramhost.client.ImportedTables;
import io.engramhost.json.JsonReader;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.SocketPaths;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The daemon under systemd (docs/upgrade.md, "Under systemd: the fd store"), with systemd's side played by conformance/systemd_emulator.py
 * (a datagram NOTIFY_SOCKET that keeps the fd store, and a restart that passes the stored fds at 3, 4, ... with
 * LISTEN_FDS, LISTEN_PID set after the fork, and LISTEN_FDNAMES): READY=1, the fd store, WATCHDOG=1, a SIGKILL
 * survived without reading the checkpoint while a client waits in the backlog, a changed checkpoint reloaded, and a
 * too small fd store refused.
 */
@Timeout(180)
class SystemdFdStoreProcessTest {
    /** user.dir is this module, engram-host/cli. */
    private static final Path EMULATOR = Path.of(System.getProperty("user.dir")).getParent().getParent()
            .resolve("conformance/systemd_emulator.py");
    private static final ClientOptions PATIENT = new ClientOptions(60_000, 0, false, "fd-store-test", -1, false, true,
            Set.of(), System.err::println, false);

    /** The emulated systemd and the service it runs. */
    private static final class Unit implements AutoCloseable {
        final Process process;
        final Path events;
        final Path output;

        Unit(Path dir, Path socket, Path ckpt, int fdStoreMax, long watchdogUsec, Path gate, int restarts)
                throws Exception {
            this(dir, socket, ckpt, fdStoreMax, watchdogUsec, gate, restarts, List.of());
        }

        /** {@code emulatorArgs}: more of the emulator's options (--deaf-until PATH). */
        Unit(Path dir, Path socket, Path ckpt, int fdStoreMax, long watchdogUsec, Path gate, int restarts,
                List<String> emulatorArgs) throws Exception {
            events = dir.resolve("events.jsonl");
            output = dir.resolve("unit.log");
            List<String> cmd = new ArrayList<>(List.of("python3", EMULATOR.toString(), "--events", events.toString(),
                    "--fdstore-max", String.valueOf(fdStoreMax), "--watchdog-usec", String.valueOf(watchdogUsec),
                    "--restarts", String.valueOf(restarts), "--restart-gate", gate.toString()));
            cmd.addAll(emulatorArgs);
            cmd.add("--");
            cmd.addAll(TestJvm.command("serve", "--socket", socket.toString(), "--numa", "none", "--checkpoint",
                    ckpt.toString()));
            process = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(output.toFile()).start();
        }

        @SuppressWarnings("unchecked")
        List<Map<String, Object>> events() throws Exception {
            List<Map<String, Object>> out = new ArrayList<>();
            if (Files.exists(events)) {
                for (String line : Files.readAllLines(events, StandardCharsets.UTF_8)) {
                    if (line.endsWith("}")) {
                        out.add((Map<String, Object>) JsonReader.parse(line));
                    }
                }
            }
            return out;
        }

        /** The first event that {@code p} accepts, waiting for it. */
        Map<String, Object> await(String what, Predicate<Map<String, Object>> p) throws Exception {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (true) {
                for (Map<String, Object> e : events()) {
                    if (p.test(e)) {
                        return e;
                    }
                }
                assertTrue(System.nanoTime() < deadline, "no " + what + " in " + events() + "\n" + log());
                Thread.sleep(20);
            }
        }

        Map<String, Object> awaitNotify(long pid, String field, String value) throws Exception {
            return await(field + "=" + value + " from pid " + pid, e -> "notify".equals(e.get("event"))
                    && ((Number) e.get("pid")).longValue() == pid && value.equals(fields(e).get(field)));
        }

        /** The pid of the {@code nth} service process the emulator started. */
        long spawned(int nth) throws Exception {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (true) {
                List<Map<String, Object>> spawns = events().stream().filter(e -> "spawn".equals(e.get("event"))).toList();
                if (spawns.size() >= nth) {
                    return ((Number) spawns.get(nth - 1).get("pid")).longValue();
                }
                assertTrue(System.nanoTime() < deadline, "no spawn #" + nth + " in " + events() + "\n" + log());
                Thread.sleep(20);
            }
        }

        String log() {
            try {
                return Files.readString(output, StandardCharsets.UTF_8);
            } catch (java.io.IOException e) {
                return e.toString();
            }
        }

        @Override
        public void close() throws Exception {
            process.destroy(); // SIGTERM: the emulator stops the service, then exits
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                process.destroyForcibly();
            }
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, String> fields(Map<String, Object> e) {
        return (Map<String, String>) (Map<?, ?>) e.get("fields");
    }

    private static Path checkpoint(Path dir, int rows) throws Exception {
        return CheckpointGenerator.writeSharded(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1, 14), rows,
                256, 9));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> status(Path socket) {
        return (Map<String, Object>) JsonReader.parse(EngramClient.status(socket, PATIENT));
    }

    /** Connects, imports every table and checks each one byte for byte against the checkpoint's files. */
    private static int verifiedTables(Path socket, Path ckpt) {
        try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), PATIENT)) {
            ContentCheck.Report r = ContentCheck.verify(t, ContentCheck.fromCheckpoint(List.of(ckpt), t.tables().keySet(),
                    1), 1);
            assertEquals(r.tables().size(), r.verified());
            return (int) r.verified();
        }
    }

    private static List<String> stored(Unit u, long pid) throws Exception {
        List<String> names = new ArrayList<>();
        for (Map<String, Object> e : u.events()) {
            if ("notify".equals(e.get("event")) && ((Number) e.get("pid")).longValue() == pid
                    && "1".equals(fields(e).get("FDSTORE"))) {
                names.add(fields(e).get("FDNAME") + (((Number) e.get("fds")).intValue() == 1 ? "" : " x" + e.get("fds")));
            }
        }
        return names;
    }

    @Test
    @SuppressWarnings("unchecked")
    void aKilledDaemonComesBackFromTheFdStoreWithoutReadingTheCheckpointAndServesTheClientThatWaited(@TempDir Path dir)
            throws Exception {
        Path ckpt = checkpoint(dir, 3000);
        Path socket = dir.resolve("run/s.sock");
        Path gate = dir.resolve("restart-gate");
        try (Unit u = new Unit(dir, socket, ckpt, 64, 1_000_000, gate, 1)) {
            long first = u.spawned(1);
            Map<String, Object> ready = u.awaitNotify(first, "READY", "1");
            assertTrue(fields(ready).get("STATUS").startsWith("ready (load): 4 tables"), String.valueOf(ready));
            assertEquals(List.of("engram-listen", "engram-region-0", "engram-catalog"), stored(u, first));
            u.await("the fd store holding the catalog", e -> "stored".equals(e.get("event"))
                    && "engram-catalog".equals(e.get("name")) && Boolean.FALSE.equals(e.get("poll")));
            u.await("STATUS= while loading", e -> "notify".equals(e.get("event"))
                    && String.valueOf(fields(e).get("STATUS")).startsWith("loading: "));
            u.awaitNotify(first, "WATCHDOG", "1"); // WATCHDOG_USEC=1 s: one every 0.5 s
            Map<String, Object> before = status(socket);
            assertEquals("load", ((Map<String, Object>) before.get("origin")).get("how"));
            assertEquals(4, verifiedTables(socket, ckpt));

            assertTrue(ProcessHandle.of(first).orElseThrow().destroyForcibly()); // SIGKILL
            u.await("the first daemon's exit", e -> "exit".equals(e.get("event")) && ((Number) e.get("signal")).intValue() == 9);
            // No daemon runs now; the socket lives on in the fd store, so this client waits in its backlog.
            CompletableFuture<Integer> waiting = CompletableFuture.supplyAsync(() -> verifiedTables(socket, ckpt));
            Thread.sleep(300);
            assertTrue(!waiting.isDone(), "the client must wait for the next daemon");
            Files.createFile(gate);

            long second = u.spawned(2);
            assertNotEquals(first, second);
            Map<String, Object> spawn = u.await("spawn #2", e -> "spawn".equals(e.get("event"))
                    && ((Number) e.get("pid")).longValue() == second);
            // stored as listen, region, catalog; passed back in reverse, as systemd 252 did (bench/systemd-runs.md)
            assertEquals(List.of("engram-catalog", "engram-region-0", "engram-listen"), spawn.get("names"));
            Map<String, Object> again = u.awaitNotify(second, "READY", "1");
            assertTrue(fields(again).get("STATUS").startsWith("ready (fd-store): 4 tables"), String.valueOf(again));
            assertEquals(4, waiting.get(60, TimeUnit.SECONDS), "the client that connected during the restart is served");

            Map<String, Object> after = status(socket);
            assertEquals(second, ((Number) after.get("pid")).longValue());
            Map<String, Object> origin = (Map<String, Object>) after.get("origin");
            assertEquals("fd-store", origin.get("how"), String.valueOf(after));
            assertEquals(0L, ((Number) origin.get("checkpoint_bytes_read")).longValue());
            assertEquals(before.get("fingerprint"), after.get("fingerprint"));
            assertEquals(4, verifiedTables(socket, ckpt));
            try (ImportedTables t = EngramClient.connect(socket, Expectation.any(), PATIENT)) {
                // found under real systemd (bench/systemd-runs.md): the kernel records SO_PEERCRED at listen(2)
                assertEquals(second, t.daemonPid(), "SO_PEERCRED names the daemon that adopted the socket");
            }
            assertTrue(u.log().contains("adopted from systemd's fd store"), u.log());
            // Stored again: the same fds, which systemd keeps once.
            assertEquals(3, u.events().stream().filter(e -> "duplicate".equals(e.get("event"))).count());
            u.awaitNotify(second, "WATCHDOG", "1");
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void aChangedCheckpointIsLoadedAndTheStaleEntriesRemoved(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir, 3000);
        Path socket = dir.resolve("run/c.sock");
        Path gate = dir.resolve("restart-gate");
        try (Unit u = new Unit(dir, socket, ckpt, 64, 0, gate, 1)) {
            long first = u.spawned(1);
            u.awaitNotify(first, "READY", "1");
            String fingerprint = (String) status(socket).get("fingerprint");
            assertTrue(ProcessHandle.of(first).orElseThrow().destroyForcibly());
            u.await("the first daemon's exit", e -> "exit".equals(e.get("event")));
            checkpoint(dir, 3001); // other shapes: another fingerprint
            Files.createFile(gate);
            long second = u.spawned(2);
            u.awaitNotify(second, "READY", "1");
            assertTrue(u.log().contains("the checkpoint changed since its tables went to the fd store"), u.log());
            Map<String, Object> after = status(socket);
            assertEquals("load", ((Map<String, Object>) after.get("origin")).get("how"));
            assertNotEquals(fingerprint, after.get("fingerprint"));
            assertEquals(4, verifiedTables(socket, ckpt));
            List<String> removed = new ArrayList<>();
            for (Map<String, Object> e : u.events()) {
                if ("removed".equals(e.get("event"))) {
                    removed.add((String) e.get("name"));
                }
            }
            // in the order the stored names were passed back, which systemd does not keep (bench/systemd-runs.md)
            Collections.sort(removed);
            assertEquals(List.of("engram-catalog", "engram-region-0"), removed, "the old tables leave the store");
            assertEquals(List.of("engram-listen", "engram-region-0", "engram-catalog"), stored(u, second));
        }
    }

    /**
     * A systemd that does not read its notify socket holds up nothing (issue 27): the daemon loads and serves, says
     * so once, and once systemd reads again gets READY=1, the fd store's entries and the latest STATUS= there, in
     * order; WATCHDOG=1 pings wait coalesced.
     */
    @Test
    void aNotifySocketNobodyReadsHoldsUpNothing(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir, 3000);
        Path socket = dir.resolve("run/deaf.sock");
        Path hearing = dir.resolve("systemd-reads-again");
        try (Unit u = new Unit(dir, socket, ckpt, 64, 400_000, dir.resolve("gate"), 0,
                List.of("--deaf-until", hearing.toString()))) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!Files.exists(SocketPaths.readyFile(socket)) && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(Files.exists(SocketPaths.readyFile(socket)), "ready while systemd reads nothing: " + u.log());
            assertEquals(4, verifiedTables(socket, ckpt), "and serving");
            String log = u.log();
            assertTrue(log.contains("systemd is not reading its notify socket"), log);
            assertEquals(1, log.split("systemd is not reading its notify socket", -1).length - 1, "said once: " + log);
            Files.createFile(hearing);
            long pid = u.spawned(1);
            u.awaitNotify(pid, "READY", "1");
            assertEquals(List.of("engram-listen", "engram-region-0", "engram-catalog"), stored(u, pid));
            Thread.sleep(1000);
            assertTrue(u.events().stream().anyMatch(e -> "notify".equals(e.get("event"))
                    && e.get("fields") instanceof Map<?, ?> f && "1".equals(f.get("WATCHDOG"))), "pings go on");
        }
    }

    @Test
    void anFdStoreTooSmallForTheTablesIsRefusedBeforeTheLoad(@TempDir Path dir) throws Exception {
        Path ckpt = checkpoint(dir, 3000);
        Path socket = dir.resolve("run/r.sock");
        try (Unit u = new Unit(dir, socket, ckpt, 2, 0, dir.resolve("gate"), 0)) {
            Map<String, Object> exit = u.await("the daemon's exit", e -> "exit".equals(e.get("event")));
            assertNotEquals(0, ((Number) exit.get("status")).intValue(), u.log());
            assertTrue(u.log().contains("the unit's fd store holds 2 fds (FDSTORE, from FileDescriptorStoreMax=), but"
                    + " keeping these tables across a restart needs 3 (1 regions, the catalog and the listening"
                    + " socket): raise FileDescriptorStoreMax= to at least 3"), u.log());
            assertTrue(!u.log().contains("creating "), "refused before the load: " + u.log());
            assertTrue(u.process.waitFor(30, TimeUnit.SECONDS));
        }
    }
}
