package io.engramhost.daemon.loop;

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
public final class ConnectionStats {
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
    public static final List<ErrorCode> IMPORT_ERRORS = List.of(ErrorCode.NOT_READY, ErrorCode.FINGERPRINT_MISMATCH,
            ErrorCode.STOPPING, ErrorCode.LOAD_FAILED);
    private final Map<ErrorCode, AtomicLong> importErrors = new EnumMap<>(ErrorCode.class);

    public ConnectionStats() {
        for (ErrorCode c : IMPORT_ERRORS) {
            importErrors.put(c, new AtomicLong());
        }
    }

    /** Connections open now, leases included. */
    public int open() {
        return open.get();
    }

    public long accepted() {
        return accepted.get();
    }

    public long refusedBusy() {
        return refusedBusy.get();
    }

    public long refusedNotAllowed() {
        return refusedNotAllowed.get();
    }

    public long evicted() {
        return evicted.get();
    }

    public long timedOut() {
        return timedOut.get();
    }

    public long badRequests() {
        return badRequests.get();
    }

    public long importsServed() {
        return importsServed.get();
    }

    /** The import-latency histogram, which the metrics register. */
    public ImportLatency importLatency() {
        return importLatency;
    }

    /** Counts an IMPORT refused with {@code code}, one of {@link #IMPORT_ERRORS}. */
    void importRefused(ErrorCode code) {
        importErrors.get(code).incrementAndGet();
    }

    public long importErrors(ErrorCode code) {
        return importErrors.get(code).get();
    }

    /** STATUS's {@code imports} object: {@code served}, and {@code errors} by code name. */
    public Map<String, Object> importsJson() {
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

    /** Lines a uid may cause per kind of event in a {@link #WINDOW_NANOS} window, whatever its number of processes. */
    static final int LINES_PER_UID = 20;
    static final long WINDOW_NANOS = 60_000_000_000L;

    /**
     * Per uid and kind: the start of its window and the lines counted in it. Without it a peer that forks a process
     * per attempt (a new pid each time) had the daemon log one line per attempt. The oldest are forgotten past 4096.
     */
    private final Map<String, long[]> perUid = new LinkedHashMap<>(64, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, long[]> eldest) {
            return size() > 4096;
        }
    };

    /**
     * Logs {@code message} unless this peer process was logged for this kind of event before, or its uid has
     * already caused {@link #LINES_PER_UID} such lines in the last minute; the line after those says that the rest
     * of the minute's are not logged (STATUS counts them all).
     */
    void warnOnce(PeerCredentials peer, String kind, String message) {
        boolean log;
        boolean announce;
        synchronized (logged) {
            if (logged.put(peer.pid() + "/" + peer.uid() + "/" + kind, Boolean.TRUE) != null) {
                return;
            }
            long now = System.nanoTime();
            long[] w = perUid.computeIfAbsent(peer.uid() + "/" + kind, k -> new long[] {now, 0});
            if (now - w[0] >= WINDOW_NANOS) {
                w[0] = now;
                w[1] = 0;
            }
            w[1]++;
            log = w[1] <= LINES_PER_UID;
            announce = w[1] == LINES_PER_UID + 1;
        }
        if (log) {
            LOG.log(WARNING, message + " (logged once per peer process)");
        } else if (announce) {
            LOG.log(WARNING, "uid " + peer.uid() + " caused " + LINES_PER_UID + " such lines (" + kind + ") from as many"
                    + " processes within a minute: the rest of this minute's are not logged (STATUS counts every"
                    + " refusal, eviction and timeout under connections)");
        }
    }

    public Map<String, Object> toJson(ConnectionLimits limits, int leases, long requestMemoryUsed) {
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
