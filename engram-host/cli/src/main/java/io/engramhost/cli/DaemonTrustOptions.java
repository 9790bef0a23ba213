package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import java.util.ArrayList;
import java.util.List;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * --daemon-uid and --accept-future-write-seal: whose daemon the client commands trust besides root's and their own
 * (docs/protocol.md, "Transport"), and which memfd seals (docs/security.md).
 */
final class DaemonTrustOptions {
    @Spec(Spec.Target.MIXEE)
    CommandSpec spec;

    @Option(names = "--daemon-uid", paramLabel = "UID",
            description = "Also trust a daemon running as UID (repeatable); root's and this user's always are. "
                    + "A daemon of any other uid (SO_PEERCRED) is refused: it may be squatting the socket path.")
    List<Long> daemonUids = new ArrayList<>();

    @Option(names = "--accept-future-write-seal",
            description = "Also accept memfds sealed FUTURE_WRITE rather than WRITE, as daemons of builds before WRITE"
                    + " seal them; only during an upgrade: FUTURE_WRITE leaves writable a mapping made before it.")
    boolean futureWriteSeal;

    ClientOptions apply(ClientOptions options) {
        List<Integer> uids = new ArrayList<>();
        for (long uid : daemonUids) {
            if (uid < 0 || uid >= 0xFFFFFFFFL) {
                throw new ParameterException(spec.commandLine(), "--daemon-uid: " + uid + " is not a uid");
            }
            uids.add((int) uid);
        }
        return options.withDaemonUids(uids).withFutureWriteSealAccepted(futureWriteSeal);
    }
}
