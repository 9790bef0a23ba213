package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.os.Posix;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** docs/protocol.md, "Socket path": the default by euid and environment, and what overrides it. */
class SocketPathsTest {
    private static Path resolve(String flag, Map<String, String> env, int euid, String instance) {
        return SocketPaths.resolve(SocketPaths.template(flag, env, euid), instance, null, d -> "GPU-x");
    }

    @Test
    void rootListensUnderRunWhateverXdgSays() {
        assertEquals(Path.of("/run/engram-host/default.sock"), resolve(null, Map.of(), 0, null));
        assertEquals(Path.of("/run/engram-host/eu-1.sock"),
                resolve(null, Map.of("XDG_RUNTIME_DIR", "/run/user/0"), 0, "eu-1"));
        assertEquals("/run/engram-host/{instance}.sock", SocketPaths.defaultTemplate(0, Map.of()));
    }

    @Test
    void otherUsersListenInTheirRuntimeDirectory() {
        Map<String, String> env = Map.of("XDG_RUNTIME_DIR", "/run/user/1000");
        assertEquals("/run/user/1000/engram-host/{instance}.sock", SocketPaths.defaultTemplate(1000, env));
        assertEquals(Path.of("/run/user/1000/engram-host/default.sock"), resolve(null, env, 1000, null));
        assertEquals(Path.of("/run/user/1000/engram-host/b.sock"), resolve("", env, 1000, "b"));
        assertEquals(Path.of("/run/user/1000/engram-host/default.sock"),
                resolve(null, Map.of("XDG_RUNTIME_DIR", "/run/user/1000//"), 1000, null), "trailing slashes dropped");
        assertEquals(Path.of("/engram-host/default.sock"), resolve(null, Map.of("XDG_RUNTIME_DIR", "/"), 1000, null));
    }

    @Test
    void otherUsersWithoutAnAbsoluteRuntimeDirectoryListenUnderTmp() {
        assertEquals(Path.of("/tmp/engram-host-1000/default.sock"), resolve(null, Map.of(), 1000, null));
        for (String xdg : new String[] {"", "run/user/1000", "./x", "/run/{user}"}) {
            assertEquals(Path.of("/tmp/engram-host-65534/default.sock"),
                    resolve(null, Map.of("XDG_RUNTIME_DIR", xdg), 65534, null), "XDG_RUNTIME_DIR='" + xdg + "'");
        }
        assertEquals("/tmp/engram-host-4294967294/{instance}.sock", SocketPaths.defaultTemplate(-2, Map.of()),
                "a uid above 2^31 is printed unsigned");
    }

    @Test
    void theEnvironmentVariableAndTheFlagOverrideTheDefault() {
        Map<String, String> env = Map.of("ENGRAM_HOST_SOCKET", "/srv/e/{instance}-{device}.sock",
                "XDG_RUNTIME_DIR", "/run/user/1000");
        assertEquals("/srv/e/{instance}-{device}.sock", SocketPaths.template(null, env, 0));
        assertEquals("/srv/e/{instance}-{device}.sock", SocketPaths.template(" ", env, 1000), "a blank flag is no flag");
        assertEquals(Path.of("/srv/e/x-3.sock"),
                SocketPaths.resolve(SocketPaths.template(null, env, 1000), "x", 3, d -> "GPU-x"));
        assertEquals("/flag/{instance}.sock", SocketPaths.template("/flag/{instance}.sock", env, 0));
        assertEquals("/flag/{instance}.sock", SocketPaths.template("/flag/{instance}.sock", Map.of(), 1000));
        assertEquals("/run/user/1000/engram-host/{instance}.sock",
                SocketPaths.template(null, Map.of("ENGRAM_HOST_SOCKET", "  ", "XDG_RUNTIME_DIR", "/run/user/1000"), 1000),
                "a blank variable is unset");
    }

    @Test
    void thisProcessUsesItsOwnEffectiveUid() {
        Map<String, String> env = Map.of("XDG_RUNTIME_DIR", "/run/user/1000");
        assertEquals(SocketPaths.defaultTemplate(Posix.geteuid(), env), SocketPaths.template(null, env));
    }

    @Test
    void aRuntimeDirectoryTooLongForASocketAddressIsRefused() {
        String xdg = "/run/" + "u".repeat(100);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> resolve(null, Map.of("XDG_RUNTIME_DIR", xdg), 1000, null));
        assertTrue(e.getMessage().contains("longer than 107 bytes"), e.getMessage());
    }

    /**
     * A user's client whose own default holds no socket reaches the system daemon's socket when one is there, and
     * says so; with --socket, ENGRAM_HOST_SOCKET, or a socket of its own, nothing changes.
     */
    @Test
    void aUsersClientFallsBackToTheSystemDaemonsSocket(@org.junit.jupiter.api.io.TempDir Path xdg) throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(Posix.geteuid() == 0, "needs root to make a file in /run");
        String instance = "sockpaths-test-" + ProcessHandle.current().pid();
        Path system = Path.of("/run/engram-host/" + instance + ".sock");
        Map<String, String> env = Map.of("XDG_RUNTIME_DIR", xdg.toString());
        Path own = xdg.resolve("engram-host/" + instance + ".sock");
        SocketPaths.ClientSocket none = SocketPaths.forClient(null, env, 1000, instance, null, d -> "x");
        assertEquals(own, none.path(), "nothing at either: its own default");
        assertEquals(null, none.note());
        java.nio.file.Files.createDirectories(system.getParent());
        java.nio.file.Files.createFile(system);
        try {
            SocketPaths.ClientSocket c = SocketPaths.forClient(null, env, 1000, instance, null, d -> "x");
            assertEquals(system, c.path());
            assertEquals("no daemon socket at " + own + " (this user's default): using the system daemon's " + system
                    + " (--socket or ENGRAM_HOST_SOCKET chooses another)", c.note());
            assertEquals(own, SocketPaths.forClient(own.toString(), env, 1000, instance, null, d -> "x").path(),
                    "--socket is taken as given");
            assertEquals(own, SocketPaths.forClient(null, Map.of("XDG_RUNTIME_DIR", xdg.toString(), "ENGRAM_HOST_SOCKET",
                    own.toString()), 1000, instance, null, d -> "x").path(), "so is ENGRAM_HOST_SOCKET");
            assertEquals(system, SocketPaths.forClient(null, env, 0, instance, null, d -> "x").path(),
                    "root's default is the system path itself");
            java.nio.file.Files.createDirectories(own.getParent());
            java.nio.file.Files.createFile(own);
            assertEquals(own, SocketPaths.forClient(null, env, 1000, instance, null, d -> "x").path(),
                    "its own socket wins");
        } finally {
            java.nio.file.Files.deleteIfExists(system);
        }
    }
}
