package io.engramhost.client;

import java.nio.file.Path;

/** No socket exists at the path: no daemon serves here. The one case a caller may fall back to a disk load. */
public final class DaemonAbsentException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final transient Path socket;

    public DaemonAbsentException(Path socket) {
        super("no engram-host daemon: " + socket + " does not exist");
        this.socket = socket;
    }

    public Path socket() {
        return socket;
    }
}
