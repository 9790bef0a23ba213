package io.engramhost.cli;

import io.engramhost.protocol.ProtocolDescriptor;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import picocli.CommandLine;

/**
 * What {@code --version} prints: the build's version (the Maven project version, filtered into
 * {@code build.properties}), the git commit it was built from (short hash, written into the jar at build
 * time as {@code git-commit.txt}; "unknown" when the build ran outside a git checkout) and the protocol
 * versions this build speaks, e.g. {@code engram-host 0.1.0 (commit abc1234, protocol 1-2)}.
 */
public final class VersionInfo implements CommandLine.IVersionProvider {
    public static final String UNKNOWN = "unknown";

    /** The one line {@code --version} prints. */
    public static String line() {
        return "engram-host " + version() + " (commit " + commit() + ", protocol " + ProtocolDescriptor.MIN_VERSION
                + "-" + ProtocolDescriptor.MAX_VERSION + ")";
    }

    public static String version() {
        Properties p = new Properties();
        try (InputStream in = VersionInfo.class.getResourceAsStream("build.properties")) {
            if (in == null) {
                return UNKNOWN;
            }
            p.load(in);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/engramhost/cli/build.properties", e);
        }
        String v = p.getProperty("version", UNKNOWN).trim();
        return v.isEmpty() || v.startsWith("${") ? UNKNOWN : v;
    }

    public static String commit() {
        try (InputStream in = VersionInfo.class.getResourceAsStream("git-commit.txt")) {
            if (in == null) {
                return UNKNOWN;
            }
            String c = new String(in.readAllBytes(), StandardCharsets.US_ASCII).trim();
            return c.matches("[0-9a-f]{4,40}") ? c : UNKNOWN;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/engramhost/cli/git-commit.txt", e);
        }
    }

    @Override
    public String[] getVersion() {
        return new String[] {line()};
    }
}
