package io.engramhost.store;

import io.engramhost.json.JsonReader;
import io.engramhost.json.JsonWriter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What a daemon's load measured, and where its tables came from: STATUS's top-level facts ({@code load},
 * {@code placement}, {@code load_threads}, {@code device_tensors}, {@code ready_s}, {@code process_ready_s},
 * {@code ready_gib_s}, {@code origin}, {@code memory_check}, {@code memory_budget}, {@code selection}, {@code content_identity};
 * docs/protocol.md). It travels
 * with the tables to a successor (a takeover, systemd's fd store) as the JSON object {@link #toJson} writes, and
 * {@link #parse} reads it back strictly: a field of the wrong type is refused with one line naming it, and fields a
 * newer build adds are ignored. Every field is optional (null: not known).
 *
 * @param load          the host tables' load timings, as STATUS shows them
 * @param placement     where the host tables' pages are
 * @param loadThreads   the threads that read the checkpoint, and the CPUs they ran on
 * @param deviceTensors the tensors copied into GPU memory
 * @param readySeconds  from the start of the load to ready
 * @param processReadySeconds from the process's start to ready
 * @param readyGibPerSecond   the tables' bytes over {@code processReadySeconds}
 * @param origin        how this process got its tables
 * @param memoryCheck   how the memory the tables need was checked before the load
 * @param memoryBudget  {@code serve --memory-budget}, in bytes
 * @param selected      which tables were selected, by which rule, and the content identity they have
 */
public record LoadReport(Timings load, Placement placement, LoadThreads loadThreads, DeviceTensorsFact deviceTensors,
        Double readySeconds, Double processReadySeconds, Double readyGibPerSecond, Origin origin, String memoryCheck,
        Long memoryBudget, Selected selected) {

    /** Nothing known yet. */
    public static final LoadReport EMPTY = new LoadReport(null, null, null, null, null, null, null, null, null, null,
            null);

    /** STATUS's {@code load}: {@link LoadTimings} as seconds, GiB/s and bytes. */
    public record Timings(double createSeconds, double createGibPerSecond, double readSeconds, double readGibPerSecond,
            long readDirectBytes, double verifySealSeconds) {
        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("create_s", createSeconds);
            m.put("create_gib_s", createGibPerSecond);
            m.put("read_s", readSeconds);
            m.put("read_gib_s", readGibPerSecond);
            m.put("read_direct_bytes", readDirectBytes);
            m.put("verify_seal_s", verifySealSeconds);
            return m;
        }

        static Timings parse(Fields f) {
            return new Timings(f.dbl("create_s"), f.dbl("create_gib_s"), f.dbl("read_s"), f.dbl("read_gib_s"),
                    f.lng("read_direct_bytes"), f.dbl("verify_seal_s"));
        }
    }

    /** Pages of the host tables per NUMA node ({@code node<N>_pages}), and why they could not be verified, if so. */
    public record Placement(Map<Integer, Long> pagesByNode, String unverified) {
        public Placement {
            pagesByNode = Collections.unmodifiableMap(new TreeMap<>(pagesByNode));
        }

        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            pagesByNode.forEach((n, c) -> m.put("node" + n + "_pages", c));
            if (unverified != null) {
                m.put("unverified", unverified);
            }
            return m;
        }

        static Placement parse(Fields f) {
            Map<Integer, Long> pages = new TreeMap<>();
            String unverified = null;
            for (String k : f.keys()) {
                if (k.equals("unverified")) {
                    unverified = f.str(k);
                } else if (k.matches("node\\d{1,4}_pages")) {
                    pages.put(Integer.parseInt(k.substring(4, k.length() - 6)), f.lng(k));
                }
            }
            return new Placement(pages, unverified);
        }
    }

    /** The load's reading threads: how many, the node whose CPUs they ran on (null: any), those CPUs, and why not. */
    public record LoadThreads(int threads, Integer node, String cpus, String why) {
        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("threads", threads);
            if (node != null) {
                m.put("node", node);
            }
            m.put("cpus", cpus);
            if (why != null) {
                m.put("why", why);
            }
            return m;
        }

        static LoadThreads parse(Fields f) {
            return new LoadThreads((int) f.lng("threads"), f.has("node") ? (int) f.lng("node") : null, f.str("cpus"),
                    f.has("why") ? f.str("why") : null);
        }
    }

    /** The tensors kept in GPU memory: how many, their bytes on each GPU, and the GPUs. */
    public record DeviceTensorsFact(int tensors, long bytesPerGpu, List<Integer> gpus) {
        public DeviceTensorsFact {
            gpus = List.copyOf(gpus);
        }

        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("tensors", tensors);
            m.put("bytes_per_gpu", bytesPerGpu);
            m.put("gpus", gpus);
            return m;
        }

        static DeviceTensorsFact parse(Fields f) {
            List<Integer> gpus = new ArrayList<>();
            for (Object g : f.list("gpus")) {
                if (!(g instanceof Long n) || n < 0 || n > Integer.MAX_VALUE) {
                    throw new IllegalArgumentException("load report: device_tensors.gpus holds " + g + ", not a GPU");
                }
                gpus.add(n.intValue());
            }
            return new DeviceTensorsFact((int) f.lng("tensors"), f.lng("bytes_per_gpu"), gpus);
        }
    }

    /** How a daemon got its tables (STATUS's {@code origin.how}). */
    public enum How {
        /** Read from the checkpoint. */
        LOAD("load"),
        /** Handed over by the daemon it took over from. */
        TAKEOVER("takeover"),
        /** Handed over by a predecessor that died before its commit. */
        TAKEOVER_ORPHANED("takeover-orphaned"),
        /** Left in systemd's fd store by a previous run. */
        FD_STORE("fd-store"),
        /** Filled from peers ({@code serve --seed-from}), the rest (if any) read from the checkpoint. */
        SEED("seed");

        private final String wire;

        How(String wire) {
            this.wire = wire;
        }

        public String wireName() {
            return wire;
        }

        static How of(String s) {
            for (How h : values()) {
                if (h.wire.equals(s)) {
                    return h;
                }
            }
            throw new IllegalArgumentException("load report: origin.how is '" + s + "', not one of load, takeover,"
                    + " takeover-orphaned, fd-store, seed");
        }
    }

    /**
     * Where the tables came from.
     *
     * @param fromPid             the predecessor's pid (0: none, or not known)
     * @param checkpointBytesRead bytes this process read from the checkpoint
     * @param handoverMillis      how long the handover took (null: a load)
     * @param storedBy            the build that put the tables in systemd's fd store (null: not from there)
     * @param seeded              what came from peers (null: none were asked)
     */
    public record Origin(How how, int fromPid, long checkpointBytesRead, Double handoverMillis, String storedBy,
            Seeded seeded) {
        public Origin(How how, int fromPid, long checkpointBytesRead, Double handoverMillis, String storedBy) {
            this(how, fromPid, checkpointBytesRead, handoverMillis, storedBy, null);
        }

        /** A load that read {@code bytes} from the checkpoint. */
        public static Origin load(long bytes) {
            return new Origin(How.LOAD, 0, bytes, null, null);
        }

        /**
         * A load of {@code total} bytes of which {@code seeded} says what the peers gave: {@code seed} when they gave
         * any, else {@code load}; the rest was read from the checkpoint.
         */
        public static Origin seeded(long total, Seeded seeded) {
            return new Origin(seeded.bytes() > 0 ? How.SEED : How.LOAD, 0, total - seeded.bytes(), null, null, seeded);
        }

        /** Tables handed over, nothing read; {@code fromPid} 0: not known. */
        public static Origin handedOver(How how, int fromPid, long sinceNanos, String storedBy) {
            return new Origin(how, fromPid, 0, Math.round((System.nanoTime() - sinceNanos) / 1e4) / 100.0, storedBy);
        }

        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("how", how.wireName());
            if (fromPid > 0) {
                m.put("from_pid", fromPid);
            }
            m.put("checkpoint_bytes_read", checkpointBytesRead);
            if (handoverMillis != null) {
                m.put("handover_ms", handoverMillis);
            }
            if (storedBy != null) {
                m.put("stored_by", storedBy);
            }
            if (seeded != null) {
                m.put("seeded", seeded.toJson());
            }
            return m;
        }

        static Origin parse(Fields f) {
            return new Origin(How.of(f.str("how")), f.has("from_pid") ? (int) f.lng("from_pid") : 0,
                    f.lng("checkpoint_bytes_read"), f.has("handover_ms") ? f.dbl("handover_ms") : null,
                    f.has("stored_by") ? f.str("stored_by") : null,
                    f.has("seeded") ? Seeded.parse(f.object("seeded")) : null);
        }
    }

    /** One peer's share of a seeded load: its verified bytes and the seconds from its first byte to its last. */
    public record SeedSource(String peer, long bytes, double seconds) {
        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("peer", peer);
            m.put("bytes", bytes);
            m.put("seconds", Math.round(seconds * 1000) / 1000.0);
            m.put("gib_s", seconds > 0 ? Math.round(bytes / (double) (1L << 30) / seconds * 100) / 100.0 : 0.0);
            return m;
        }

        static SeedSource parse(Fields f) {
            return new SeedSource(f.str("peer"), f.lng("bytes"), f.dbl("seconds"));
        }
    }

    /**
     * STATUS's {@code origin.seeded}: the verified bytes the peers gave, over how many seconds, each peer's share, and
     * how many peers were refused (no key, another checkpoint, a table whose digest differed), and of those bytes how
     * many came through the staging buffers ({@code --seed-staging}) before their region existed.
     */
    public record Seeded(List<SeedSource> sources, long bytes, double seconds, int peersRefused, long stagedBytes) {
        public Seeded {
            sources = List.copyOf(sources);
        }

        public Seeded(List<SeedSource> sources, long bytes, double seconds, int peersRefused) {
            this(sources, bytes, seconds, peersRefused, 0);
        }

        Map<String, Object> toJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("bytes", bytes);
            m.put("seconds", Math.round(seconds * 1000) / 1000.0);
            m.put("gib_s", seconds > 0 ? Math.round(bytes / (double) (1L << 30) / seconds * 100) / 100.0 : 0.0);
            m.put("peers_refused", peersRefused);
            m.put("staged_bytes", stagedBytes);
            List<Object> l = new ArrayList<>();
            sources.forEach(s -> l.add(s.toJson()));
            m.put("sources", l);
            return m;
        }

        static Seeded parse(Fields f) {
            List<SeedSource> out = new ArrayList<>();
            List<?> l = f.list("sources");
            for (int i = 0; i < l.size(); i++) {
                out.add(SeedSource.parse(Fields.of(l.get(i), "origin.seeded.sources[" + i + "]")));
            }
            return new Seeded(out, f.lng("bytes"), f.dbl("seconds"), (int) f.lng("peers_refused"),
                    f.has("staged_bytes") ? f.lng("staged_bytes") : 0);
        }
    }

    /** What the peers gave, before the load is over (the load's end makes it the origin, {@link Origin#seeded}). */
    public LoadReport withSeeded(Seeded s) {
        return withOrigin(new Origin(How.SEED, 0, 0, null, null, s));
    }

    public LoadReport withLoad(Timings t) {
        return new LoadReport(t, placement, loadThreads, deviceTensors, readySeconds, processReadySeconds,
                readyGibPerSecond, origin, memoryCheck, memoryBudget, selected);
    }

    public LoadReport withPlacement(Placement p) {
        return new LoadReport(load, p, loadThreads, deviceTensors, readySeconds, processReadySeconds, readyGibPerSecond,
                origin, memoryCheck, memoryBudget, selected);
    }

    public LoadReport withLoadThreads(LoadThreads t) {
        return new LoadReport(load, placement, t, deviceTensors, readySeconds, processReadySeconds, readyGibPerSecond,
                origin, memoryCheck, memoryBudget, selected);
    }

    public LoadReport withDeviceTensors(DeviceTensorsFact d) {
        return new LoadReport(load, placement, loadThreads, d, readySeconds, processReadySeconds, readyGibPerSecond,
                origin, memoryCheck, memoryBudget, selected);
    }

    /** The times to ready, from the load's start and from the process's, and the rate over the latter. */
    public LoadReport withReady(double seconds, double fromProcessStart, double gibPerSecond) {
        return new LoadReport(load, placement, loadThreads, deviceTensors, seconds, fromProcessStart, gibPerSecond,
                origin, memoryCheck, memoryBudget, selected);
    }

    public LoadReport withOrigin(Origin o) {
        return new LoadReport(load, placement, loadThreads, deviceTensors, readySeconds, processReadySeconds,
                readyGibPerSecond, o, memoryCheck, memoryBudget, selected);
    }

    /** How the memory was checked, and the operator's budget (null: none). */
    public LoadReport withMemory(String check, Long budget) {
        return new LoadReport(load, placement, loadThreads, deviceTensors, readySeconds, processReadySeconds,
                readyGibPerSecond, origin, check, budget, selected);
    }

    /** Which tables and how they are known: the selection ({@code rule} config, tables or all) and the level. */
    public record Selected(String rule, String description, int tables, String contentIdentity) {
        Map<String, Object> selectionJson() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("rule", rule);
            m.put("description", description);
            m.put("tables", tables);
            return m;
        }

        static Selected parse(Fields selection, String contentIdentity) {
            return new Selected(selection.str("rule"), selection.str("description"), (int) selection.lng("tables"),
                    contentIdentity);
        }
    }

    /** The selection and the content identity of what is served. */
    public LoadReport withSelected(Selected s) {
        return new LoadReport(load, placement, loadThreads, deviceTensors, readySeconds, processReadySeconds,
                readyGibPerSecond, origin, memoryCheck, memoryBudget, s);
    }

    /** The facts as STATUS shows them, in this order, each only when known. */
    public Map<String, Object> toJson() {
        Map<String, Object> m = new LinkedHashMap<>();
        if (selected != null) {
            m.put("selection", selected.selectionJson());
            m.put("content_identity", selected.contentIdentity());
        }
        if (memoryCheck != null) {
            m.put("memory_check", memoryCheck);
        }
        if (memoryBudget != null) {
            m.put("memory_budget", memoryBudget);
        }
        if (loadThreads != null) {
            m.put("load_threads", loadThreads.toJson());
        }
        if (load != null) {
            m.put("load", load.toJson());
        }
        if (placement != null) {
            m.put("placement", placement.toJson());
        }
        if (deviceTensors != null) {
            m.put("device_tensors", deviceTensors.toJson());
        }
        if (readySeconds != null) {
            m.put("ready_s", readySeconds);
        }
        if (processReadySeconds != null) {
            m.put("process_ready_s", processReadySeconds);
        }
        if (readyGibPerSecond != null) {
            m.put("ready_gib_s", readyGibPerSecond);
        }
        if (origin != null) {
            m.put("origin", origin.toJson());
        }
        return m;
    }

    /** {@link #toJson} as text, for a handover. */
    public String encode() {
        return JsonWriter.write(toJson());
    }

    /**
     * The report a predecessor encoded ({@link #encode}; today's builds and earlier ones write the same keys).
     *
     * @throws IllegalArgumentException with one line naming the field that is not what it must be
     */
    public static LoadReport parse(String json) {
        Object o;
        try {
            o = JsonReader.parse(json);
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("load report: not JSON: " + e.getMessage(), e);
        }
        Fields f = Fields.of(o, "load report");
        LoadReport r = EMPTY;
        if (f.has("load")) {
            r = r.withLoad(Timings.parse(f.object("load")));
        }
        if (f.has("placement")) {
            r = r.withPlacement(Placement.parse(f.object("placement")));
        }
        if (f.has("load_threads")) {
            r = r.withLoadThreads(LoadThreads.parse(f.object("load_threads")));
        }
        if (f.has("device_tensors")) {
            r = r.withDeviceTensors(DeviceTensorsFact.parse(f.object("device_tensors")));
        }
        if (f.has("ready_s") || f.has("process_ready_s") || f.has("ready_gib_s")) {
            r = r.withReady(f.dbl("ready_s"), f.dbl("process_ready_s"), f.dbl("ready_gib_s"));
        }
        if (f.has("origin")) {
            r = r.withOrigin(Origin.parse(f.object("origin")));
        }
        if (f.has("selection")) { // a build before selections wrote neither
            r = r.withSelected(Selected.parse(f.object("selection"),
                    f.has("content_identity") ? f.str("content_identity") : "headers"));
        }
        return r.withMemory(f.has("memory_check") ? f.str("memory_check") : null,
                f.has("memory_budget") ? f.lng("memory_budget") : null);
    }

    /** A JSON object's fields, read with their types checked; each error names the field's path. */
    private record Fields(Map<?, ?> map, String path) {
        static Fields of(Object o, String path) {
            if (!(o instanceof Map<?, ?> m)) {
                throw new IllegalArgumentException(path + " is not a JSON object");
            }
            return new Fields(m, path);
        }

        boolean has(String k) {
            return map.containsKey(k) && map.get(k) != null;
        }

        List<String> keys() {
            List<String> out = new ArrayList<>();
            map.keySet().forEach(k -> out.add(String.valueOf(k)));
            return out;
        }

        private Object get(String k) {
            if (!has(k)) {
                throw new IllegalArgumentException(path + "." + k + " is missing");
            }
            return map.get(k);
        }

        Fields object(String k) {
            return of(get(k), path + "." + k);
        }

        double dbl(String k) {
            if (get(k) instanceof Number n) {
                return n.doubleValue();
            }
            throw new IllegalArgumentException(path + "." + k + " is not a number");
        }

        long lng(String k) {
            if (get(k) instanceof Long n) {
                return n;
            }
            throw new IllegalArgumentException(path + "." + k + " is not an integer");
        }

        String str(String k) {
            if (get(k) instanceof String s) {
                return s;
            }
            throw new IllegalArgumentException(path + "." + k + " is not a string");
        }

        List<?> list(String k) {
            if (get(k) instanceof List<?> l) {
                return l;
            }
            throw new IllegalArgumentException(path + "." + k + " is not a list");
        }
    }
}
