package io.engramhost.cli;

import io.engramhost.os.Posix;
import io.engramhost.protocol.SocketPaths;
import java.nio.file.Path;
import picocli.CommandLine.Option;

/** --socket, --instance and --device: resolved the same way by the daemon and every client command. */
final class SocketOptions {
    @Option(names = "--socket", paramLabel = "TEMPLATE",
            description = "Socket path or template with {instance}, {device}, {device_uuid} "
                    + "(default: $ENGRAM_HOST_SOCKET, else " + SocketPaths.ROOT_TEMPLATE + " for root, "
                    + "$XDG_RUNTIME_DIR/engram-host/{instance}.sock for other users, else "
                    + "/tmp/engram-host-<euid>/{instance}.sock).")
    String socket;

    @Option(names = "--instance", paramLabel = "NAME", description = "Fills {instance} (default: default).")
    String instance;

    @Option(names = "--device", paramLabel = "N", description = "GPU ordinal: fills {device} and {device_uuid}.")
    Integer device;

    String template() {
        return SocketPaths.template(socket, System.getenv());
    }

    Path resolve() {
        return SocketPaths.resolve(template(), instance, device, GpuInfo::uuidOf);
    }

    /**
     * The socket a client command talks to: {@link #resolve}, or, for a user whose own default holds no socket, the
     * system daemon's when it has one ({@link SocketPaths#forClient}), said in one line on stderr.
     */
    Path resolveForClient() {
        SocketPaths.ClientSocket c = SocketPaths.forClient(socket, System.getenv(), Posix.geteuid(),
                instance, device, GpuInfo::uuidOf);
        if (c.note() != null) {
            System.err.println("engram-host: " + c.note());
        }
        return c.path();
    }
}
