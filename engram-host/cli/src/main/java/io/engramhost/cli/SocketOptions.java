package io.engramhost.cli;

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
}
