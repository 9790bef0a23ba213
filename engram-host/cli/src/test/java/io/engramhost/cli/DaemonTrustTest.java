package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.EngramClientException;
import io.engramhost.client.ImportedTables;
import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import io.engramhost.os.ProcessProbe;
import io.engramhost.protocol.Expectation;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The client checks that it talks to the daemon (docs/protocol.md, "Transport" and "How to map a
 * region"): a local user who squats the socket path with a server of their own must not get a client,
 * root's least of all, to map tables whose bytes they can change. The impostor is a separate process
 * (impostor_daemon.py), the clients are the CLI in new JVMs or the API in this one.
 */
@Timeout(300)
class DaemonTrustTest {
    private static final long PAGE = Posix.pageSize();
    private static Path dir;
    private static Path checkpoint;

    @BeforeAll
    static void setUp() throws Exception {
        dir = Impostor.sharedDir("engram-trust-");
        checkpoint = CheckpointGenerator.writeSingle(dir.resolve("ckpt"), new CheckpointGenerator.Spec(List.of(1), 300, 64, 1));
    }

    @AfterAll
    static void tearDown() throws Exception {
        Impostor.deleteTree(dir);
    }

    private static String sha256OfForged(long size) throws Exception {
        byte[] pattern = "forged by an impostor ".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        byte[] b = new byte[(int) size];
        for (int i = 0; i < b.length; i++) {
            b[i] = pattern[i % pattern.length];
        }
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(b));
    }

    private static void assertOneLineError(CliRun r) {
        assertEquals(1, r.exit(), "exit 1: " + r.out() + r.err());
        assertEquals(1, r.err().lines().count(), "one line: " + r.err());
        assertFalse(r.err().contains("\tat "), "no stack trace: " + r.err());
    }

    @Test
    void shouldRefuseADaemonOfAnotherUidUnlessListed() throws Exception {
        assumeTrue(Impostor.canRunAsNobody(), "needs root and setpriv to run the impostor as uid " + Impostor.NOBODY);
        try (Impostor i = Impostor.start(dir, "squatter", "good", true)) {
            String s = i.socket.toString();
            String refusal = "refusing the daemon on " + s + ": its uid (SO_PEERCRED, pid " + i.pid() + ") is 65534, and"
                    + " this client trusts only the uids 0 (root)";
            for (String[] args : List.of(new String[] {"import", "--socket", s},
                    new String[] {"import", "--socket", s, "--expect-checkpoint", checkpoint.toString(), "--digest", "sha256"},
                    new String[] {"import", "--socket", s, "--fallback-checkpoint", checkpoint.toString()},
                    new String[] {"status", "--socket", s}, new String[] {"stop", "--socket", s})) {
                CliRun r = CliRun.of(args);
                assertOneLineError(r);
                assertTrue(r.err().contains(refusal) && r.err().contains("add --daemon-uid 65534"),
                        String.join(" ", args) + ": " + r.err());
                assertFalse(r.err().contains("from disk"), "a refused daemon is no reason to load from disk: " + r.err());
                assertEquals("good: hung up before HELLO", i.awaitLine("good:"), "nothing was sent to the impostor");
            }
            CliRun other = CliRun.of("import", "--socket", s, "--daemon-uid", "12345", "--daemon-uid", "4242");
            assertOneLineError(other);
            assertTrue(other.err().contains("trusts only the uids 0 (root), 4242 (--daemon-uid), 12345 (--daemon-uid);"),
                    "the message lists the uids trusted: " + other.err());
            i.awaitLine("good:");

            CliRun admitted = CliRun.of("import", "--socket", s, "--daemon-uid", "65534", "--json", "--digest", "sha256",
                    "--expect-checkpoint", checkpoint.toString());
            assertEquals(0, admitted.exit(), "--daemon-uid 65534 admits the daemon: " + admitted.err());
            Map<String, Map<String, Object>> tables = CliIntegrationTest.importedTables(admitted.out());
            assertEquals(sha256OfForged(PAGE), tables.get("forged.0").get("sha256"), "whatever it serves, sealed");
            assertTrue(i.awaitLine("good:").startsWith("good: sent MANIFEST with 2 fds"));
        }
        CliRun usage = CliRun.of("import", "--daemon-uid", "-1");
        assertEquals(2, usage.exit(), usage.err());
        assertTrue(usage.err().contains("--daemon-uid: -1 is not a uid"), usage.err());
    }

    @Test
    void shouldRefuseAWelcomeWhoseUidIsNotThePeers() throws Exception {
        try (Impostor i = Impostor.start(dir, "liar", "welcome-uid", false)) {
            CliRun r = CliRun.of("import", "--socket", i.socket.toString());
            assertOneLineError(r);
            assertTrue(r.err().contains("its WELCOME says uid " + (Posix.geteuid() + 4242) + " but SO_PEERCRED says uid "
                    + Posix.geteuid() + " (pid " + i.pid() + ")"), r.err());
            assertEquals("welcome-uid: hung up after WELCOME (version 2)", i.awaitLine("welcome-uid:"));
        }
    }

    /** Each impostor hands one region; the refusal names it, the seals it has and those it lacks. */
    @Test
    void shouldRefuseMemfdsWithoutEverySealAndNameWhatIsMissing() throws Exception {
        Map<String, String> refusals = Map.of(
                "unsealed", "region 0 (memfd, " + PAGE + " bytes; table forged.0): its seals are none (0x0); missing SEAL,"
                        + " SHRINK, GROW, WRITE, so its bytes could change under this client; refused",
                "unsealable", "its seals are SEAL (0x1); missing SHRINK, GROW, WRITE,",
                "no-seal", "its seals are SHRINK|GROW|WRITE (0xe); missing SEAL,",
                "no-shrink", "its seals are SEAL|GROW|WRITE (0xd); missing SHRINK,",
                "no-grow", "its seals are SEAL|SHRINK|WRITE (0xb); missing GROW,",
                "no-write", "its seals are SEAL|SHRINK|GROW (0x7); missing WRITE,",
                "future-write", "its seals are SEAL|SHRINK|GROW|FUTURE_WRITE (0x17); missing WRITE (FUTURE_WRITE leaves"
                        + " writable a mapping made before it),",
                "second-unsealed", "region 1 (memfd, " + (2 * PAGE) + " bytes; table forged.1): its seals are none",
                "regular-file", "region 0 (memfd, " + PAGE + " bytes; table forged.0): fcntl(F_GET_SEALS) failed: EINVAL"
                        + " (Invalid argument): the fd is no memfd, so its bytes could change under this client; refused",
                "small", "region 0 (memfd, " + (2 * PAGE) + " bytes; table forged.0): the memfd holds " + PAGE
                        + " bytes, less than the manifest's " + (2 * PAGE) + "; refused");
        for (Map.Entry<String, String> e : refusals.entrySet()) {
            try (Impostor i = Impostor.start(dir, e.getKey(), e.getKey(), false)) {
                CliRun r = CliRun.of("import", "--socket", i.socket.toString(), "--expect-checkpoint",
                        checkpoint.toString());
                assertOneLineError(r);
                assertTrue(r.err().contains(e.getValue()), e.getKey() + ": " + r.err());
                assertTrue(i.awaitLine(e.getKey() + ":").contains("the client hung up"), e.getKey());
            }
        }
        for (String acceptable : List.of("good", "sealed-write", "large")) {
            try (Impostor i = Impostor.start(dir, acceptable, acceptable, false)) {
                CliRun r = CliRun.of("import", "--socket", i.socket.toString(), "--digest", "sha256", "--json");
                assertEquals(0, r.exit(), acceptable + ": " + r.err());
                assertEquals(sha256OfForged(PAGE), CliIntegrationTest.importedTables(r.out()).get("forged.0").get("sha256"));
            }
        }
    }

    private static long impostorMappings() throws Exception {
        return Files.readAllLines(Path.of("/proc/self/maps")).stream().filter(l -> l.contains("impostor.")).count();
    }

    /** In this JVM: a refused region leaves no fd and no mapping behind, the good ones included. */
    @Test
    void shouldLeakNoFdOrMappingWhenARegionIsRefused() throws Exception {
        try (Impostor good = Impostor.start(dir, "api-good", "good", false)) {
            try (ImportedTables t = EngramClient.connect(good.socket, Expectation.any(), ClientOptions.defaults())) {
                assertEquals(2, t.tables().size()); // warm-up: what the JVM opens for good on a first import
                assertEquals(2, impostorMappings(), "both regions mapped");
            }
            assertEquals(0, impostorMappings());
        }
        for (String kase : List.of("second-unsealed", "no-seal", "regular-file", "small")) {
            try (Impostor i = Impostor.start(dir, "api-" + kase, kase, false)) {
                int fds = ProcessProbe.countOpenFds();
                int owned = Fd.openCount();
                EngramClientException e = assertThrows(EngramClientException.class,
                        () -> EngramClient.connect(i.socket, Expectation.any(), ClientOptions.defaults()));
                assertTrue(e.getMessage().contains("refused"), e.getMessage());
                assertNull(e.code(), "a local refusal has no daemon error code");
                assertEquals(0, impostorMappings(), kase + ": no region mapped");
                assertEquals(owned, Fd.openCount(), kase + ": every received fd closed");
                assertEquals(fds, ProcessProbe.countOpenFds(), kase + ": /proc/self/fd as before");
                assertTrue(i.awaitLine(kase + ":").contains("the client hung up"), "the connection closed too");
            }
        }
    }

    @Test
    void shouldRefuseADaemonThatAnswersAnExpectationItDoesNotMeet() throws Exception {
        try (Impostor i = Impostor.start(dir, "wrong-fingerprint", "wrong-fingerprint", false)) {
            int fds = ProcessProbe.countOpenFds();
            EngramClientException e = assertThrows(EngramClientException.class, () -> EngramClient.connect(i.socket,
                    Expectation.sha256("ab".repeat(32)), ClientOptions.defaults()));
            String served = java.util.HexFormat.of().formatHex(java.security.MessageDigest.getInstance("SHA-256")
                    .digest("EGFP-other".getBytes(java.nio.charset.StandardCharsets.US_ASCII))); // the impostor's
            assertTrue(e.getMessage().contains("answered an expectation it does not meet: fingerprint "
                    + served + ", not the expected " + "ab".repeat(32)), e.getMessage());
            assertEquals(fds, ProcessProbe.countOpenFds(), "the MANIFEST's fds closed");
            i.awaitLine("wrong-fingerprint:");
            CliRun r = CliRun.of("import", "--socket", i.socket.toString(), "--expect-checkpoint", checkpoint.toString());
            assertOneLineError(r);
            assertTrue(r.err().contains("answered an expectation it does not meet"), r.err());
        }
    }

    @Test
    void shouldRefuseFramesOutsideTheChosenVersion() throws Exception {
        Map<String, String> refusals = Map.of(
                "welcome-v3", "broke the protocol: WELCOME chose version 3, but this client offered versions 1 to 2",
                "welcome-header-v1", "broke the protocol: WELCOME chose version 2 in a frame of version 1",
                "manifest-v1", "broke the protocol: MANIFEST encoded as version 1, but version 2 was chosen",
                "error-v2-at-accept", "broke the protocol: ERROR encoded as version 2 before a version was chosen;"
                        + " it must be version 1");
        for (Map.Entry<String, String> e : refusals.entrySet()) {
            try (Impostor i = Impostor.start(dir, e.getKey(), e.getKey(), false)) {
                int fds = ProcessProbe.countOpenFds();
                EngramClientException api = assertThrows(EngramClientException.class,
                        () -> EngramClient.connect(i.socket, Expectation.any(), ClientOptions.defaults()));
                assertTrue(api.getMessage().contains(e.getValue()), e.getKey() + ": " + api.getMessage());
                assertEquals(fds, ProcessProbe.countOpenFds(), e.getKey() + ": the MANIFEST's fds closed too");
                i.awaitLine(e.getKey() + ":");
                CliRun r = CliRun.of("import", "--socket", i.socket.toString(), "--fallback-checkpoint",
                        checkpoint.toString());
                assertOneLineError(r);
                assertTrue(r.err().contains(e.getValue()), e.getKey() + ": " + r.err());
                assertFalse(r.err().contains("from disk"), r.err());
            }
        }
    }

    @Test
    void shouldShowAnUnknownErrorCodeWithItsNumberAndMessage() throws Exception {
        try (Impostor i = Impostor.start(dir, "later", "unknown-error", false)) {
            EngramClientException api = assertThrows(EngramClientException.class,
                    () -> EngramClient.connect(i.socket, Expectation.any(), ClientOptions.defaults()));
            assertNull(api.code());
            assertEquals(42, api.wireCode());
            assertEquals("code 42: a code from a later daemon", api.getMessage());
            CliRun r = CliRun.of("import", "--socket", i.socket.toString());
            assertOneLineError(r);
            assertEquals("engram-host import: code 42: a code from a later daemon", r.err().strip());
        }
    }

    @Test
    void shouldSurfaceBusyAndTimedOutWithTheDaemonsMessage() throws Exception {
        try (Impostor i = Impostor.start(dir, "busy", "busy", false)) {
            CliRun r = CliRun.of("import", "--socket", i.socket.toString(), "--fallback-checkpoint", checkpoint.toString());
            assertOneLineError(r);
            assertEquals("engram-host import: BUSY: connection limit: --max-connections 1 reached (impostor)",
                    r.err().strip());
            CliRun status = CliRun.of("status", "--socket", i.socket.toString());
            assertOneLineError(status);
            assertTrue(status.err().contains("BUSY: connection limit"), status.err());
        }
        try (Impostor i = Impostor.start(dir, "timed-out", "timed-out", false)) {
            CliRun r = CliRun.of("import", "--socket", i.socket.toString(), "--fallback-checkpoint", checkpoint.toString());
            assertOneLineError(r);
            assertEquals("engram-host import: TIMED_OUT: request timeout: 10 s from the first byte of a request to its"
                    + " last", r.err().strip());
        }
    }
}
