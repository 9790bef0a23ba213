package io.engramhost.daemon;

import static java.lang.System.Logger.Level.WARNING;

import io.engramhost.os.PeerCredentials;
import io.engramhost.protocol.ErrorCode;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Counters of the connections the daemon refused, evicted or timed out, for STATUS, and the log of
 * those events: one line per peer process and kind, not one per attempt, so a peer that retries in
 * a loop cannot flood the log.
 */
final class ConnectionStats {
    private static final System.Logger LOG = System.getLogger(ConnectionStats.class.getName());
    final AtomicInteger open = new AtomicInteger();
    final AtomicLong accepted = new AtomicLong();
    final AtomicLong refusedBusy = new AtomicLong();
    final AtomicLong refusedNotAllowed = new AtomicLong();
    final AtomicLong evicted = new AtomicLong();
    final AtomicLong timedOut = new AtomicLong();
    final AtomicLong badRequests = new AtomicLong();
    /** Imports answered with a MANIFEST and its fds. */
    final AtomicLong importsServed = new AtomicLong();
    /** How long those answers took, request taken up to answer written. */
    final ImportLatency importLatency = new ImportLatency();
    /** The codes an IMPORT is refused with (a malformed one counts as a bad request). */
    static final List<ErrorCode> IMPORT_ERRORS = List.of(ErrorCode.NOT_READY, ErrorCode.FINGERPRINT_MISMATCH,
            ErrorCode.STOPPING, ErrorCode.LOAD_FAILED);
    private final Map<ErrorCode, AtomicLong> importErrors = new EnumMap<>(ErrorCode.class);

    ConnectionStats() {
        for (ErrorCode c : IMPORT_ERRORS) {
            importErrors.put(c, new AtomicLong());
        }
    }

    /** Counts an IMPORT refused with {@code code}, one of {@link #IMPORT_ERRORS}. */
    void importRefused(ErrorCode code) {
        importErrors.get(code).incrementAndGet();
    }

    long importErrors(ErrorCode code) {
        return importErrors.get(code).get();
    }

    /** STATUS's {@code imports} object: {@code served}, and {@code errors} by code name. */
    Map<String, Object> importsJson() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("served", importsServed.get());
        Map<String, Object> e = new LinkedHashMap<>();
        for (ErrorCode c : IMPORT_ERRORS) {
            e.put(c.name(), importErrors(c));
        }
        m.put("errors", e);
        return m;
    }

    /** Peers (pid and kind of event) already logged; the oldest are forgotten past 4096. */
    private final Map<String, Boolean> logged = new LinkedHashMap<>(64, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
            return size() > 4096;
        }
    };

    /** Logs {@code message} unless this peer process was logged for this kind of event before. */
    void warnOnce(PeerCredentials peer, String kind, String message) {
        boolean first;
        synchronized (logged) {
            first = logged.put(peer.pid() + "/" + peer.uid() + "/" + kind, Boolean.TRUE) == null;
        }
        if (first) {
            LOG.log(WARNING, message + " (logged once per peer process)");
        }
    }

    Map<String, Object> toJson(ConnectionLimits limits, int leases, long requestMemoryUsed) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("open", open.get());
        m.put("leases", leases);
        m.put("accepted", accepted.get());
        m.put("refused_busy", refusedBusy.get());
        m.put("refused_not_allowed", refusedNotAllowed.get());
        m.put("evicted", evicted.get());
        m.put("timed_out", timedOut.get());
        m.put("bad_requests", badRequests.get());
        m.put("request_memory_used", requestMemoryUsed);
        Map<String, Object> l = new LinkedHashMap<>();
        l.put("max_connections", limits.maxConnections());
        l.put("max_connections_per_uid", limits.maxPerUid());
        l.put("hello_timeout_ms", limits.helloTimeoutMillis());
        l.put("request_timeout_ms", limits.requestTimeoutMillis());
        l.put("idle_timeout_ms", limits.idleTimeoutMillis());
        l.put("request_memory", limits.requestMemory());
        l.put("workers", limits.workers());
        m.put("limits", l);
        return m;
    }
}
