package io.engramhost.daemon.loop;

import io.engramhost.protocol.ProtocolDescriptor;

/**
 * What one peer's connections may cost the daemon (docs/protocol.md, "Deadlines and limits of a
 * connection"). Checked once in {@link #check()}; errors name the flag.
 *
 * @param maxConnections       connections of all peers together, leases included
 * @param maxPerUid            connections of one uid, leases included
 * @param helloTimeoutMillis   from connect to a complete HELLO
 * @param requestTimeoutMillis from a request's first byte to its last, and for the answer to be taken
 * @param idleTimeoutMillis    a connection with no request under way and no lease
 * @param requestMemory        bytes of unfinished request payloads, all connections together
 * @param workers              threads that answer complete requests
 */
public record ConnectionLimits(int maxConnections, int maxPerUid, int helloTimeoutMillis, int requestTimeoutMillis,
        int idleTimeoutMillis, long requestMemory, int workers) {

    public static final int DEFAULT_MAX_CONNECTIONS = 4096;
    public static final int DEFAULT_MAX_PER_UID = 1024;
    public static final int DEFAULT_HELLO_TIMEOUT_MILLIS = 5_000;
    public static final int DEFAULT_REQUEST_TIMEOUT_MILLIS = 10_000;
    public static final int DEFAULT_IDLE_TIMEOUT_MILLIS = 60_000;
    public static final long DEFAULT_REQUEST_MEMORY = 64L << 20;
    public static final int DEFAULT_WORKERS = 4;

    public static ConnectionLimits defaults() {
        return new ConnectionLimits(DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_UID, DEFAULT_HELLO_TIMEOUT_MILLIS,
                DEFAULT_REQUEST_TIMEOUT_MILLIS, DEFAULT_IDLE_TIMEOUT_MILLIS, DEFAULT_REQUEST_MEMORY, DEFAULT_WORKERS);
    }

    public ConnectionLimits withRequestTimeout(int millis) {
        return new ConnectionLimits(maxConnections, maxPerUid, helloTimeoutMillis, millis, idleTimeoutMillis,
                requestMemory, workers);
    }

    public ConnectionLimits check() {
        positive("--max-connections", maxConnections);
        positive("--max-connections-per-uid", maxPerUid);
        positive("--hello-timeout-ms", helloTimeoutMillis);
        positive("--request-timeout-ms", requestTimeoutMillis);
        positive("--idle-timeout-ms", idleTimeoutMillis);
        positive("--workers", workers);
        if (maxConnections > 1 << 20) {
            throw new IllegalArgumentException("--max-connections: " + maxConnections + " is over 1048576");
        }
        if (workers > 256) {
            throw new IllegalArgumentException("--workers: " + workers + " is over 256");
        }
        if (requestMemory < ProtocolDescriptor.MAX_REQUEST) {
            throw new IllegalArgumentException("--request-memory: " + requestMemory + " bytes cannot hold one IMPORT"
                    + " of the largest allowed size (16842752 bytes)");
        }
        return this;
    }

    private static void positive(String flag, long v) {
        if (v < 1) {
            throw new IllegalArgumentException(flag + ": " + v + " must be at least 1");
        }
    }
}
