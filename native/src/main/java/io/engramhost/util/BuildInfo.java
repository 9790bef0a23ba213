package io.engramhost.util;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

/**
 * This build's version and commit, the one source of both: the version is Maven's project version, filtered into
 * {@code io/engramhost/util/build.properties} (native/pom.xml); the commit is the short hash of HEAD, written next to
 * it as {@code git-commit.txt} when native is built ({@value #UNKNOWN} outside a git checkout). Read once. What
 * {@code --version}, the WELCOME frame's {@code daemon_version}, STATUS's {@code version}, a takeover's build and
 * {@code engram_host_build_info} say.
 */
public final class BuildInfo {
    public static final String UNKNOWN = "unknown";
    private static final String VERSION = readVersion();
    private static final String COMMIT = readCommit();

    private BuildInfo() {
    }

    /** The project's version, e.g. {@code 0.1.0} ({@value #UNKNOWN} in a build that did not filter it). */
    public static String version() {
        return VERSION;
    }

    /** The commit built, a short hash ({@value #UNKNOWN} when the build ran outside a git checkout). */
    public static String commit() {
        return COMMIT;
    }

    private static String readVersion() {
        Properties p = new Properties();
        try (InputStream in = BuildInfo.class.getResourceAsStream("build.properties")) {
            if (in == null) {
                return UNKNOWN;
            }
            p.load(in);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/engramhost/util/build.properties", e);
        }
        String v = p.getProperty("version", UNKNOWN).trim();
        return v.isEmpty() || v.startsWith("${") ? UNKNOWN : v;
    }

    private static String readCommit() {
        try (InputStream in = BuildInfo.class.getResourceAsStream("git-commit.txt")) {
            if (in == null) {
                return UNKNOWN;
            }
            String c = new String(in.readAllBytes(), StandardCharsets.US_ASCII).trim();
            return c.matches("[0-9a-f]{4,40}") ? c : UNKNOWN;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/engramhost/util/git-commit.txt", e);
        }
    }
}
