package io.engramhost.client;

/**
 * How a client connects.
 *
 * @param requestTimeoutMillis bound on each answer the daemon owes (welcome, manifest, status)
 * @param notReadyWaitMillis   how long to keep retrying while the daemon is still loading (0: fail at once)
 * @param populate             prefault the mappings (MAP_POPULATE) so first reads do not fault
 * @param clientName           a name for the daemon's log
 */
public record ClientOptions(int requestTimeoutMillis, int notReadyWaitMillis, boolean populate, String clientName) {
    public static ClientOptions defaults() {
        return new ClientOptions(10_000, 0, false, "engram-client");
    }

    public ClientOptions withNotReadyWait(int millis) {
        return new ClientOptions(requestTimeoutMillis, millis, populate, clientName);
    }

    public ClientOptions withPopulate(boolean p) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, p, clientName);
    }

    public ClientOptions withName(String name) {
        return new ClientOptions(requestTimeoutMillis, notReadyWaitMillis, populate, name);
    }
}
