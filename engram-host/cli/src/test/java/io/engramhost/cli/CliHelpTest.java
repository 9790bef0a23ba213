package io.engramhost.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.protocol.ProtocolDescriptor;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Every command answers {@code COMMAND --help} and {@code help COMMAND} with its usage, exit 0; {@code --version}
 * names the version, the commit and the protocol versions. The command line of an invocation that names a command
 * holds that command alone; any other holds them all.
 */
@Timeout(120)
class CliHelpTest {
    private static final String[] COMMANDS = {"serve", "import", "status", "stop", "verify", "inspect", "topology",
        "generate", "demo"};

    @Test
    void shouldGiveTheRootOnlyTheCommandItsFirstArgumentNames() {
        for (String command : COMMANDS) {
            assertEquals(java.util.Set.of(command), Main.commandLine(command, "--help").getSubcommands().keySet(),
                    command);
        }
        java.util.Set<String> all = new java.util.HashSet<>(java.util.List.of(COMMANDS));
        all.add("help");
        for (String[] args : new String[][] {{}, {"--help"}, {"--verbose", "import"}, {"help", "import"}, {"imprt"}}) {
            assertEquals(all, Main.commandLine(args).getSubcommands().keySet(), String.join(" ", args));
        }
    }

    @Test
    void shouldShowEveryCommandsUsageBothWays() throws Exception {
        for (String command : COMMANDS) {
            CliRun dashed = CliRun.of(command, "--help");
            assertEquals(0, dashed.exit(), command + " --help: " + dashed.err());
            assertTrue(dashed.out().startsWith("Usage: engram-host " + command), dashed.out());
            assertTrue(dashed.out().contains("--help") && dashed.out().contains("--version"), dashed.out());
        }
        // serve's --tables defaults to the selection rule of docs/checkpoints.md, not to every tensor
        String serve = CliRun.of("serve", "--help").out().replaceAll("\\s+", " ");
        assertTrue(serve.contains("--tables=GLOB[,GLOB...] Tensors to serve (default: the engram.embed.weight and"
                + " .scale tables of the layers the model's config.json names in engram_layer_ids; without such a"
                + " config.json, every tensor, with a warning;"), serve);
        CliRun help = CliRun.of("help", "import");
        assertEquals(0, help.exit(), help.err());
        assertTrue(help.out().startsWith("Usage: engram-host import"), help.out());
        CliRun version = CliRun.of("--version");
        assertEquals(0, version.exit(), version.err());
        assertTrue(version.out().strip().matches("engram-host \\d+\\.\\d+\\.\\d+(-SNAPSHOT)? \\(commit ([0-9a-f]{7,40}|unknown),"
                + " protocol " + ProtocolDescriptor.MIN_VERSION + "-" + ProtocolDescriptor.MAX_VERSION + "\\)"),
                version.out());
        assertEquals(VersionInfo.line(), version.out().strip(), "the build's own line");
        assertEquals(version.out(), CliRun.of("status", "--version").out(), "a command's --version is the same");
        CliRun unknown = CliRun.of("import", "--no-such-option");
        assertEquals(2, unknown.exit());
        assertTrue(unknown.err().contains("Try 'engram-host import --help'."), unknown.err());
    }
}
