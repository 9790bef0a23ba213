package io.engramhost.daemon;

import io.engramhost.daemon.loop.Answers;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.daemon.loop.ConnectionStats;
import io.engramhost.daemon.loop.Leases;
import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.DaemonState;
import io.engramhost.protocol.FrameWriter;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.Parts;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.store.Catalog;
import io.engramhost.store.LoadProgress;
import io.engramhost.store.LoadReport;
import io.engramhost.util.BuildInfo;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The STATUS document: a JSON object whose fields docs/protocol.md lists.
 *
 * <p>Its {@code tables} list does not change once a catalog is loaded, and it is most of the document: 17 MB for
 * 100,000 tables. It is encoded once, with the catalog's other {@link Answers}, and shared by every reply
 * ({@link #reply}), as a manifest is, so that concurrent STATUS requests, or peers slow to take their answers, do not
 * each hold their own copy (and the maps and strings it was built from): four at once used to exhaust the daemon's
 * heap.
 */
final class StatusDocument {
    /** Stands for the tables in the document as first written; replaced by the shared encoding. */
    private static final String TABLES_MARK = "\u0000engram-status-tables\u0000";
    private static final byte[] TABLES_MARK_JSON = ("\"tables\":\"\\u0000engram-status-tables\\u0000\"")
            .getBytes(StandardCharsets.UTF_8);

    private StatusDocument() {
    }

    /**
     * What the document says of a daemon, read at once.
     *
     * @param answers null unless the daemon serves a catalog
     */
    record Facts(DaemonState state, int pid, int uid, String backend, String instance, String socket, double uptimeSeconds,
            LoadProgress.Snapshot progress, String failure, Answers answers, LoadReport report, List<Leases.Lease> leases,
            ConnectionStats stats, ConnectionLimits limits, long requestMemoryUsed) {
    }

    /** The whole document as one string (for callers in this JVM; the wire answer is {@link #reply}). */
    static String of(Facts f) {
        String head = document(f);
        if (f.answers() == null) {
            return head;
        }
        byte[] h = head.getBytes(StandardCharsets.UTF_8);
        int at = markAt(h);
        return new String(h, 0, at, StandardCharsets.UTF_8) + "\"tables\":"
                + new String(f.answers().statusTables(), StandardCharsets.UTF_8)
                + new String(h, at + TABLES_MARK_JSON.length, h.length - at - TABLES_MARK_JSON.length, StandardCharsets.UTF_8);
    }

    /**
     * The STATUS_REPLY frame in {@code version} as slices: the frame header and json length, the document up to its
     * tables, the catalog's shared encoding of them, and the rest of the document.
     */
    static List<Parts.Slice> reply(Facts f, int version) {
        byte[] h = document(f).getBytes(StandardCharsets.UTF_8);
        if (f.answers() == null) {
            return List.of(Parts.Slice.of(new FrameWriter(MessageType.STATUS_REPLY, version).blob(h).toArray()));
        }
        int at = markAt(h);
        byte[] key = "\"tables\":".getBytes(StandardCharsets.UTF_8);
        byte[] tables = f.answers().statusTables();
        int after = at + TABLES_MARK_JSON.length;
        long length = (long) at + key.length + tables.length + (h.length - after);
        if (length > ProtocolDescriptor.MAX_FRAME) {
            throw new IllegalStateException("the STATUS document of " + length + " bytes exceeds " + ProtocolDescriptor.MAX_FRAME);
        }
        byte[] start = new FrameWriter(MessageType.STATUS_REPLY, version).i32((int) length).raw(Arrays.copyOf(h, at))
                .raw(key).toArray();
        return List.of(Parts.Slice.of(start), Parts.Slice.of(tables), new Parts.Slice(h, after, h.length - after));
    }

    private static int markAt(byte[] h) {
        outer:
        for (int i = 0; i + TABLES_MARK_JSON.length <= h.length; i++) {
            for (int j = 0; j < TABLES_MARK_JSON.length; j++) {
                if (h[i + j] != TABLES_MARK_JSON[j]) {
                    continue outer;
                }
            }
            return i;
        }
        throw new IllegalStateException("the STATUS document lost its tables' place");
    }

    /** The catalog's tables as a JSON array, written in 64 KiB pieces (made once, by {@link Answers}). */
    static byte[] tablesJson(Catalog c) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        StringBuilder sb = new StringBuilder();
        sb.append('[');
        boolean first = true;
        for (Manifest.Table t : c.allTables()) {
            if (!first) {
                sb.append(',');
            }
            first = false;
            JsonWriter.write(sb, table(t));
            if (sb.length() > 1 << 16) {
                out.writeBytes(sb.toString().getBytes(StandardCharsets.UTF_8));
                sb.setLength(0);
            }
        }
        sb.append(']');
        out.writeBytes(sb.toString().getBytes(StandardCharsets.UTF_8));
        return out.toByteArray();
    }

    private static String document(Facts f) {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("state", f.state().wireName());
        s.put("pid", f.pid());
        s.put("uid", f.uid());
        s.put("version", BuildInfo.version());
        s.put("protocol", List.of(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION));
        s.put("backend", f.backend());
        s.put("instance", f.instance());
        s.put("socket", f.socket());
        s.put("uptime_s", f.uptimeSeconds());
        Map<String, Object> p = new LinkedHashMap<>();
        p.put("phase", f.progress().phase());
        p.put("detail", f.progress().detail());
        p.put("bytes_done", f.progress().done());
        p.put("bytes_total", f.progress().total());
        s.put("progress", p);
        if (f.failure() != null) {
            s.put("error", f.failure());
        }
        if (f.answers() != null) {
            Catalog c = f.answers().catalog();
            s.put("fingerprint", c.fingerprintSha256());
            s.put("bytes", c.totalBytes());
            s.put("regions", c.regionCount());
            s.put("tables", TABLES_MARK);
        }
        s.putAll(f.report().toJson());
        List<Object> ls = new ArrayList<>();
        for (Leases.Lease l : f.leases()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("id", l.id());
            m.put("pid", l.pid());
            m.put("uid", l.uid());
            m.put("since", l.since().toString());
            ls.add(m);
        }
        s.put("leases", ls);
        s.put("imports", f.stats().importsJson());
        s.put("connections", f.stats().toJson(f.limits(), ls.size(), f.requestMemoryUsed()));
        return JsonWriter.write(s);
    }

    private static Object table(Manifest.Table t) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("name", t.name());
        m.put("dtype", t.dtype());
        List<Object> shape = new ArrayList<>();
        for (long dim : t.shape()) {
            shape.add(dim);
        }
        m.put("shape", shape);
        m.put("bytes", t.bytes());
        m.put("backend", t.kind().backend());
        m.put("numa_node", t.numaNode());
        m.put("device", t.device());
        m.put("digest", String.format("%016x", t.digest()));
        return m;
    }
}
