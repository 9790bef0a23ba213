package io.engramhost.cli;

import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.util.BuildInfo;
import picocli.CommandLine;

/**
 * What {@code --version} prints: the build's version and the git commit it was built from ({@link BuildInfo}, the
 * one source of both) and the protocol versions this build speaks, e.g.
 * {@code engram-host 0.1.0 (commit abc1234, protocol 1-2)}.
 */
public final class VersionInfo implements CommandLine.IVersionProvider {
    /** The one line {@code --version} prints. */
    public static String line() {
        return "engram-host " + BuildInfo.version() + " (commit " + BuildInfo.commit() + ", protocol "
                + ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION + ")";
    }

    @Override
    public String[] getVersion() {
        return new String[] {line()};
    }
}
