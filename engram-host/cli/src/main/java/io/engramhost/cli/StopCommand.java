package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/** {@code stop}: an orderly stop. Clients keep their mappings. */
@Command(name = "stop", description = "Stop a daemon; clients keep the tables they mapped.")
final class StopCommand implements Callable<Integer> {
    @Mixin
    SocketOptions socket;

    @Mixin
    DaemonTrustOptions trust;

    @Override
    public Integer call() {
        Path path = socket.resolveForClient();
        EngramClient.stop(path, trust.apply(ClientOptions.defaults().withName("engram-host stop")));
        System.out.println("stop acknowledged by the daemon on " + path);
        return 0;
    }
}
