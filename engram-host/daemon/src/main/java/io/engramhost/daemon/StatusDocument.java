package io.engramhost.daemon;

import io.engramhost.json.JsonWriter;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.store.Catalog;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The STATUS document: a JSON object whose fields docs/protocol.md lists. */
final class StatusDocument {
    private StatusDocument() {
    }

    static String of(Daemon d, long requestMemoryUsed) {
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
        Catalog c = d.catalog();
        if (c != null) {
            s.put("fingerprint", c.fingerprintSha256());
            s.put("bytes", c.totalBytes());
            s.put("regions", c.regionCount());
            s.put("tables", tables(c));
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

    private static List<Object> tables(Catalog c) {
        List<Object> tables = new ArrayList<>();
        for (Manifest.Table t : c.allTables()) {
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
            tables.add(m);
        }
        return tables;
    }
}
