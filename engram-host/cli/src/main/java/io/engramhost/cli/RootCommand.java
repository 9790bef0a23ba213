package io.engramhost.cli;

import io.engramhost.hooks.DaemonHooks;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code engram-host} itself, without its commands: its name, description, version and the options every command
 * inherits. {@link Main} adds every command to it; {@link Main#commandLine} uses it alone with the one command an
 * invocation names.
 */
@Command(name = "engram-host", mixinStandardHelpOptions = true, scope = CommandLine.ScopeType.INHERIT,
        versionProvider = VersionInfo.class,
        description = "Keeps Engram tables resident and hands them to engines over Unix sockets.")
class RootCommand implements Runnable {
    @Option(names = "--verbose", description = "Print stack traces with errors.", scope = CommandLine.ScopeType.INHERIT)
    boolean verbose;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    /** Where a daemon that {@code serve} starts lets its starter step in: nowhere, unless {@link Main#run} says. */
    DaemonHooks hooks = DaemonHooks.NONE;

    @Override
    public void run() {
        throw new CommandLine.ParameterException(spec.commandLine(), "a command is needed: "
                + String.join(", ", spec.subcommands().keySet()));
    }
}
