package io.engramhost.daemon;

import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.FrameWriter;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.Parts;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.store.Catalog;
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
 * 100,000 tables. It is encoded once per catalog and shared by every answer ({@link #reply}), as a manifest is, so
 * that concurrent STATUS requests, or peers slow to take their answers, do not each hold their own copy (and the
 * maps and strings it was built from): four at once used to exhaust the daemon's heap.
 */
final class StatusDocument {
    /** Stands for the tables in the document as first written; replaced by the shared encoding. */
    private static final String TABLES_MARK = "\u0000engram-status-tables\u0000";
    private static final byte[] TABLES_MARK_JSON = ("\"tables\":\"\\u0000engram-status-tables\\u0000\"")
            .getBytes(StandardCharsets.UTF_8);
    private StatusDocument() {
    }

    /** One daemon's encoding of its catalog's tables, made at the first STATUS once the catalog is loaded. */
    static final class Tables {
        private Catalog encodedFor;
        private byte[] encoded;

        /** The catalog's tables as a JSON array, encoded once per catalog. */
        synchronized byte[] json(Catalog c) {
            if (encodedFor != c) {
                encoded = null; // the previous catalog's, before the next is built
                encoded = encode(c);
                encodedFor = c;
            }
            return encoded;
        }
    }

    /** The whole document as one string (for callers in this JVM; the wire answer is {@link #reply}). */
    static String of(Daemon d, long requestMemoryUsed) {
        Catalog c = d.catalog();
        String head = document(d, requestMemoryUsed, c);
        if (c == null) {
            return head;
        }
        byte[] h = head.getBytes(StandardCharsets.UTF_8);
        int at = markAt(h);
        return new String(h, 0, at, StandardCharsets.UTF_8) + "\"tables\":"
                + new String(d.statusTables().json(c), StandardCharsets.UTF_8)
                + new String(h, at + TABLES_MARK_JSON.length, h.length - at - TABLES_MARK_JSON.length, StandardCharsets.UTF_8);
    }

    /**
     * The STATUS_REPLY frame in {@code version} as slices: the frame header and json length, the document up to its
     * tables, the catalog's shared encoding of them, and the rest of the document.
     */
    static List<Parts.Slice> reply(Daemon d, long requestMemoryUsed, int version) {
        Catalog c = d.catalog();
        byte[] h = document(d, requestMemoryUsed, c).getBytes(StandardCharsets.UTF_8);
        if (c == null) {
            return List.of(Parts.Slice.of(new FrameWriter(MessageType.STATUS_REPLY, version).blob(h).toArray()));
        }
        int at = markAt(h);
        byte[] key = "\"tables\":".getBytes(StandardCharsets.UTF_8);
        byte[] tables = d.statusTables().json(c);
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

    /** The catalog's tables as a JSON array, written in 64 KiB pieces. */
    private static byte[] encode(Catalog c) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        StringBuilder sb = new StringBuilder();
        sb.append('[');
        boolean first = true;
        for (Object t : tables(c)) {
            if (!first) {
                sb.append(',');
            }
            first = false;
            JsonWriter.write(sb, t);
            if (sb.length() > 1 << 16) {
                out.writeBytes(sb.toString().getBytes(StandardCharsets.UTF_8));
                sb.setLength(0);
            }
        }
        sb.append(']');
        out.writeBytes(sb.toString().getBytes(StandardCharsets.UTF_8));
        return out.toByteArray();
    }

    private static String document(Daemon d, long requestMemoryUsed, Catalog c) {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("state", d.state().wireName());
        s.put("pid", d.pid());
        s.put("uid", d.uid());
        s.put("version", Daemon.VERSION);
        s.put("protocol", List.of(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION));
        s.put("backend", d.context().backend().wireName());
        s.put("instance", d.context().instanceName());
        s.put("socket", d.socket().toString());
        s.put("uptime_s", d.uptimeSeconds());
        Map<String, Object> p = new LinkedHashMap<>();
        io.engramhost.store.LoadProgress.Snapshot now = d.progress().snapshot();
        p.put("phase", now.phase());
        p.put("detail", now.detail());
        p.put("bytes_done", now.done());
        p.put("bytes_total", now.total());
        s.put("progress", p);
        if (d.failure() != null) {
            s.put("error", d.failure());
        }
        if (c != null) {
            s.put("fingerprint", c.fingerprintSha256());
            s.put("bytes", c.totalBytes());
            s.put("regions", c.regionCount());
            s.put("tables", TABLES_MARK);
        }
        s.putAll(d.progress().facts());
        List<Object> ls = new ArrayList<>();
        for (Leases.Lease l : d.leases().list()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("id", l.id());
            m.put("pid", l.pid());
            m.put("uid", l.uid());
            m.put("since", l.since().toString());
            ls.add(m);
        }
        s.put("leases", ls);
        s.put("imports", d.stats().importsJson());
        s.put("connections", d.stats().toJson(d.context().limits(), ls.size(), requestMemoryUsed));
        return JsonWriter.write(s);
    }

    private static Iterable<Object> tables(Catalog c) {
        List<Manifest.Table> all = c.allTables();
        return () -> all.stream().map(StatusDocument::table).iterator();
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
